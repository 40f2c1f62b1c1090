package charttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test; its ci/ holds the values files with
// options on.
const chartDir = "../helm"

// kubeVersion is the Kubernetes the chart is linted and rendered for: the
// oldest its options need (a preStop sleep needs 1.30).
const kubeVersion = "v1.30.0"

const (
	release   = "tally"
	namespace = "polls"
)

// valueSets are the values the chart is checked with: none (values.yaml
// alone) and each file of ci/.
func valueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	sets := map[string]map[string]any{"default values": {}}
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no values files in %s/ci", chartDir)
	}
	for _, f := range files {
		vals, err := common.ReadValuesFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sets[filepath.Base(f)] = vals
	}
	return sets
}

func capabilities(t *testing.T) *common.Capabilities {
	t.Helper()
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	return caps
}

// lintChart runs what `helm lint --strict --kube-version` runs and returns
// its warnings and errors; info messages are logged.
func lintChart(t *testing.T, vals map[string]any) []string {
	t.Helper()
	linter := lint.RunAll(chartDir, vals, namespace, lint.WithKubeVersion(&capabilities(t).KubeVersion))
	var problems []string
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			problems = append(problems, m.Error())
		} else {
			t.Logf("helm lint: %s", m.Error())
		}
	}
	return problems
}

// TestLint: the chart lints with no warning for each set of values.
func TestLint(t *testing.T) {
	t.Parallel()
	for name, vals := range valueSets(t) {
		if problems := lintChart(t, vals); len(problems) > 0 {
			t.Errorf("helm lint --strict with %s:\n%s", name, strings.Join(problems, "\n"))
		}
	}
}

// TestLintRefusesWrongValues: values.schema.json refuses a misspelled
// field, a value of the wrong type and one out of its set, so a mistake in
// a values file fails before anything is rendered.
func TestLintRefusesWrongValues(t *testing.T) {
	t.Parallel()
	for name, vals := range map[string]map[string]any{
		"misspelled field":    {"intake": map[string]any{"replica": 3}},
		"misspelled section":  {"serviceMonitors": map[string]any{"enabled": true}},
		"wrong type":          {"config": map[string]any{"shards": "two"}},
		"not one of its set":  {"config": map[string]any{"redisMode": "replicated"}},
		"not a duration":      {"config": map[string]any{"startupWait": "2 minutes"}},
		"not a digest":        {"image": map[string]any{"digest": "latest"}},
		"not a TALLY_ var":    {"intake": map[string]any{"extraEnv": []any{map[string]any{"name": "RATE", "value": "1"}}}},
		"not a database URL":  {"secrets": map[string]any{"databaseURL": "tally_app@db/tally"}},
		"port out of range":   {"intake": map[string]any{"adminPort": 70000}},
		"misspelled in probe": {"intake": map[string]any{"readinessProbe": map[string]any{"periodSecond": 5}}},
	} {
		problems := lintChart(t, vals)
		if len(problems) == 0 {
			t.Errorf("%s (%v): helm lint found nothing wrong", name, vals)
			continue
		}
		if !strings.Contains(strings.Join(problems, "\n"), "values don't meet the specifications of the schema") {
			t.Errorf("%s: helm lint failed, but not on the schema:\n%s", name, strings.Join(problems, "\n"))
		}
	}
}

// manifest is one rendered document: the template it came from and the
// object it decoded into.
type manifest struct {
	source string
	obj    any
	meta   metav1.Object
	kind   string
}

func (m manifest) String() string { return m.source + ": " + m.kind + " " + m.meta.GetName() }

// render runs what `helm template` runs and decodes every document.
func render(t *testing.T, vals map[string]any) []manifest {
	t.Helper()
	return renderAs(t, release, vals)
}

// renderAs renders the chart as the release named release.
func renderAs(t *testing.T, release string, vals map[string]any) []manifest {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(chrt, vals,
		common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, capabilities(t))
	if err != nil {
		t.Fatalf("the values: %v", err)
	}
	files, err := engine.Render(chrt, top)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []manifest
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		docs, err := splitYAML(files[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, doc := range docs {
			m, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s: %v\n%s", name, err, doc)
				continue
			}
			m.source = name
			out = append(out, m)
		}
	}
	return out
}

// splitYAML returns the documents of a rendered template that hold
// something (a template that renders nothing gives none).
func splitYAML(s string) ([][]byte, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, doc)
		}
	}
}

// strict decodes the kinds of k8s.io/api, refusing unknown and repeated
// fields.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeStrict decodes one document into its Kubernetes API type, or, for
// a ServiceMonitor, into serviceMonitor; an unknown field, a repeated one
// or a kind of neither fails.
func decodeStrict(doc []byte) (manifest, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return manifest{}, err
	}
	if tm.APIVersion == "monitoring.coreos.com/v1" && tm.Kind == "ServiceMonitor" {
		var sm serviceMonitor
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return manifest{}, err
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sm); err != nil {
			return manifest{}, fmt.Errorf("ServiceMonitor: %w", err)
		}
		return manifest{obj: &sm, meta: &sm.ObjectMeta, kind: tm.Kind}, nil
	}
	obj, gvk, err := strict.Decode(doc, nil, nil)
	if err != nil {
		return manifest{}, err
	}
	meta, ok := obj.(metav1.Object)
	if !ok {
		return manifest{}, fmt.Errorf("%s has no object metadata", gvk)
	}
	return manifest{obj: obj, meta: meta, kind: gvk.Kind}, nil
}

// serviceMonitor is the part of Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart uses; a field the chart writes that
// is not here fails the strict decode, as a misspelled one would.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Relabelings   []struct {
				Action      string `json:"action"`
				TargetLabel string `json:"targetLabel"`
				Replacement string `json:"replacement"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is what one set of values rendered, by kind and name.
type rendered struct {
	all []manifest
}

func (r rendered) of(kind string) []manifest {
	var out []manifest
	for _, m := range r.all {
		if m.kind == kind {
			out = append(out, m)
		}
	}
	return out
}

func (r rendered) kinds() []string {
	var out []string
	for _, m := range r.all {
		out = append(out, m.kind+"/"+m.meta.GetName())
	}
	sort.Strings(out)
	return out
}

// workload is a pod template with what it came from.
type workload struct {
	m   manifest
	pod *corev1.PodTemplateSpec
}

func (r rendered) workloads() []workload {
	var out []workload
	for _, m := range r.all {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{m, &o.Spec.Template})
		case *batchv1.Job:
			out = append(out, workload{m, &o.Spec.Template})
		}
	}
	return out
}

func (r rendered) deployment(t *testing.T, component string) *appsv1.Deployment {
	t.Helper()
	for _, m := range r.of("Deployment") {
		if d := m.obj.(*appsv1.Deployment); d.Spec.Template.Labels["app.kubernetes.io/component"] == component {
			return d
		}
	}
	t.Fatalf("no Deployment of %s in %v", component, r.kinds())
	return nil
}

// TestRender renders each set of values and checks that the objects are
// the ones asked for, and fit each other and the binary.
func TestRender(t *testing.T) {
	t.Parallel()
	help := daemonsHelp(t)
	for name, vals := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := rendered{render(t, vals)}
			if t.Failed() {
				return
			}
			t.Logf("rendered %v", r.kinds())
			checkKinds(t, r, vals)
			checkPods(t, r, vals)
			checkServices(t, r)
			checkMigrations(t, r, vals)
			checkEnv(t, r, vals, help)
		})
	}
}

// on reads a boolean value by its path, false when unset.
func on(vals map[string]any, path ...string) bool {
	var v any = vals
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		v = m[p]
	}
	b, _ := v.(bool)
	return b
}

func str(vals map[string]any, path ...string) string {
	var v any = vals
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

// checkKinds: the optional objects are there exactly when asked for.
func checkKinds(t *testing.T, r rendered, vals map[string]any) {
	t.Helper()
	count := func(kind string) int { return len(r.of(kind)) }
	if got := count("Deployment"); got != 2 {
		t.Errorf("%d Deployments, want 2 (intake, projector): %v", got, r.kinds())
	}
	if got := count("PodDisruptionBudget"); got != 1 {
		t.Errorf("%d PodDisruptionBudgets, want 1", got)
	}
	hpa := on(vals, "intake", "autoscaling", "enabled")
	if got := count("HorizontalPodAutoscaler"); got != map[bool]int{false: 0, true: 1}[hpa] {
		t.Errorf("%d HorizontalPodAutoscalers with intake.autoscaling.enabled=%t", got, hpa)
	}
	if d := r.deployment(t, "intake"); (d.Spec.Replicas != nil) == hpa {
		t.Errorf("intake Deployment replicas %v with intake.autoscaling.enabled=%t: set exactly when no autoscaler sets them", d.Spec.Replicas, hpa)
	}
	sm := on(vals, "serviceMonitor", "enabled")
	if got := count("ServiceMonitor"); got != map[bool]int{false: 0, true: 2}[sm] {
		t.Errorf("%d ServiceMonitors with serviceMonitor.enabled=%t", got, sm)
	}
	services := 1 // intake's
	if sm || on(vals, "intake", "adminService", "enabled") {
		services++
	}
	if sm || on(vals, "projector", "metricsService", "enabled") {
		services++
	}
	if got := count("Service"); got != services {
		t.Errorf("%d Services, want %d: %v", got, services, r.kinds())
	}
	secrets := 2 // the daemons' and the migrations' hook
	if str(vals, "secrets", "existingSecret") != "" {
		secrets = 0
	}
	if got := count("Secret"); got != secrets {
		t.Errorf("%d Secrets, want %d: %v", got, secrets, r.kinds())
	}
	for _, hpaM := range r.of("HorizontalPodAutoscaler") {
		h := hpaM.obj.(*autoscalingv2.HorizontalPodAutoscaler)
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != r.deployment(t, "intake").Name {
			t.Errorf("%s scales %v, want the intake Deployment", hpaM, h.Spec.ScaleTargetRef)
		}
	}
	for _, pdbM := range r.of("PodDisruptionBudget") {
		p := pdbM.obj.(*policyv1.PodDisruptionBudget)
		if !selects(p.Spec.Selector.MatchLabels, r.deployment(t, "intake").Spec.Template.Labels) {
			t.Errorf("%s selects %v, not the intake pods", pdbM, p.Spec.Selector.MatchLabels)
		}
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkPods: every pod is hardened, mounts what it names, and probes
// ports it has; intake probes /readyz and /healthz on its admin port.
func checkPods(t *testing.T, r rendered, vals map[string]any) {
	t.Helper()
	for _, w := range r.workloads() {
		spec := w.pod.Spec
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s: the pod may run as root: %+v", w.m, psc)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: the pod's seccomp profile is not RuntimeDefault", w.m)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: a service account token is mounted", w.m)
		}
		if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			t.Errorf("%s: service links are on: Kubernetes would add TALLY_*_PORT variables", w.m)
		}
		if len(spec.InitContainers) > 0 || len(spec.Containers) == 0 {
			t.Errorf("%s: %d init containers, %d containers", w.m, len(spec.InitContainers), len(spec.Containers))
		}
		volumes := map[string]corev1.Volume{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = v
		}
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
				sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: container %s is not locked down (read-only root, no privilege escalation, drop ALL, RuntimeDefault): %+v", w.m, c.Name, sc)
			}
			if want := imageRef(vals); c.Image != want {
				t.Errorf("%s: container %s runs %s, want %s", w.m, c.Name, c.Image, want)
			}
			for _, vm := range c.VolumeMounts {
				if _, ok := volumes[vm.Name]; !ok {
					t.Errorf("%s: container %s mounts %s, which is no volume of the pod", w.m, c.Name, vm.Name)
				}
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for probe, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
				if p == nil {
					continue
				}
				if p.HTTPGet == nil {
					t.Errorf("%s: %s probe is not an HTTP GET", w.m, probe)
					continue
				}
				if _, ok := ports[p.HTTPGet.Port.StrVal]; !ok {
					t.Errorf("%s: %s probe on port %v, which container %s does not name", w.m, probe, p.HTTPGet.Port.String(), c.Name)
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				checkSecretRef(t, r, vals, w.m, v.Secret.SecretName, v.Secret.Items)
			}
		}
	}

	intake := r.deployment(t, "intake").Spec.Template.Spec.Containers[0]
	for probe, want := range map[string]struct {
		p    *corev1.Probe
		path string
	}{
		"readiness": {intake.ReadinessProbe, "/readyz"},
		"liveness":  {intake.LivenessProbe, "/healthz"},
		"startup":   {intake.StartupProbe, "/healthz"},
	} {
		if want.p == nil || want.p.HTTPGet == nil || want.p.HTTPGet.Path != want.path || want.p.HTTPGet.Port != intstr.FromString("admin") {
			t.Errorf("intake's %s probe is %+v, want GET %s on the admin port", probe, want.p, want.path)
		}
	}
	env := envOf(intake)
	for _, p := range intake.Ports {
		listen := map[string]string{"http": "TALLY_INTAKE_LISTEN", "admin": "TALLY_INTAKE_ADMIN_LISTEN"}[p.Name]
		if got := env[listen].Value; got != fmt.Sprintf(":%d", p.ContainerPort) {
			t.Errorf("intake: port %s is %d, and %s=%q", p.Name, p.ContainerPort, listen, got)
		}
	}
	projector := r.deployment(t, "projector").Spec.Template.Spec.Containers[0]
	if e := envOf(projector)["TALLY_PROJECTOR_CONSUMER"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("the projector's consumer name is %+v, want the pod's name", e)
	}
}

func imageRef(vals map[string]any) string {
	repo, tag, digest := str(vals, "image", "repository"), str(vals, "image", "tag"), str(vals, "image", "digest")
	if repo == "" {
		repo = "tally"
	}
	if tag == "" {
		chrt, err := loader.Load(chartDir)
		if err != nil {
			return err.Error()
		}
		tag = chrt.Metadata.AppVersion
	}
	ref := repo + ":" + tag
	if digest != "" {
		ref += "@" + digest
	}
	return ref
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	return env
}

// checkSecretRef: a Secret the chart makes holds every entry named; one
// it does not make must be secrets.existingSecret or intake.tlsSecretName.
func checkSecretRef(t *testing.T, r rendered, vals map[string]any, from manifest, name string, items []corev1.KeyToPath) {
	t.Helper()
	for _, m := range r.of("Secret") {
		s := m.obj.(*corev1.Secret)
		if s.Name != name {
			continue
		}
		for _, it := range items {
			if _, ok := s.StringData[it.Key]; !ok {
				t.Errorf("%s reads %s from the Secret %s, which has no such entry", from, it.Key, name)
			}
		}
		return
	}
	if name != str(vals, "secrets", "existingSecret") && name != str(vals, "intake", "tlsSecretName") {
		t.Errorf("%s reads the Secret %s, which the chart does not make", from, name)
	}
}

// checkServices: every Service selects the pods of a Deployment and sends
// to a port they name; every ServiceMonitor selects a Service by a port
// it has, in the release's namespace, with a job label the rules use.
func checkServices(t *testing.T, r rendered) {
	t.Helper()
	for _, m := range r.of("Service") {
		svc := m.obj.(*corev1.Service)
		var pods *corev1.PodTemplateSpec
		for _, d := range r.of("Deployment") {
			if tmpl := &d.obj.(*appsv1.Deployment).Spec.Template; selects(svc.Spec.Selector, tmpl.Labels) {
				pods = tmpl
			}
		}
		if pods == nil {
			t.Errorf("%s selects %v: no pods of the chart", m, svc.Spec.Selector)
			continue
		}
		for _, p := range svc.Spec.Ports {
			found := false
			for _, c := range pods.Spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == p.TargetPort.StrVal
				}
			}
			if !found {
				t.Errorf("%s sends port %s to %s, which its pods do not name", m, p.Name, p.TargetPort.String())
			}
		}
	}
	for _, m := range r.of("ServiceMonitor") {
		sm := m.obj.(*serviceMonitor)
		var svc *corev1.Service
		for _, s := range r.of("Service") {
			if selects(sm.Spec.Selector.MatchLabels, s.meta.GetLabels()) {
				if svc != nil {
					t.Errorf("%s selects more than one Service", m)
				}
				svc = s.obj.(*corev1.Service)
			}
		}
		if svc == nil {
			t.Errorf("%s selects %v: no Service of the chart", m, sm.Spec.Selector.MatchLabels)
			continue
		}
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
			t.Errorf("%s looks in the namespaces %v, want %s", m, sm.Spec.NamespaceSelector.MatchNames, namespace)
		}
		for _, e := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
				t.Errorf("%s scrapes port %s, which the Service %s does not name", m, e.Port, svc.Name)
			}
			job := ""
			for _, rl := range e.Relabelings {
				if rl.TargetLabel == "job" {
					job = rl.Replacement
				}
			}
			if want := "tally-" + strings.TrimSuffix(strings.TrimSuffix(svc.Labels["app.kubernetes.io/component"], "-admin"), "-metrics"); job != want {
				t.Errorf("%s sets job=%q, want %q (deploy/prometheus's job names)", m, job, want)
			}
		}
	}
}

// checkMigrations: tally migrate up runs as a pre-install and pre-upgrade
// hook, after the hook Secret it reads (a lower weight) when the chart
// makes it.
func checkMigrations(t *testing.T, r rendered, vals map[string]any) {
	t.Helper()
	jobs := r.of("Job")
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs, want the migrations' one", len(jobs))
	}
	job := jobs[0].obj.(*batchv1.Job)
	if got := job.Annotations["helm.sh/hook"]; got != "pre-install,pre-upgrade" {
		t.Errorf("the migrations' Job is the hook %q, want pre-install,pre-upgrade", got)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"migrate", "up"}) || len(c.Command) > 0 {
		t.Errorf("the migrations' Job runs %v %v, want the entrypoint with migrate up", c.Command, c.Args)
	}
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the migrations' pod restarts %s", job.Spec.Template.Spec.RestartPolicy)
	}
	ref := envOf(c)["TALLY_DATABASE_URL"].ValueFrom
	if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Key != "migrate-database-url" {
		t.Fatalf("the migrations' TALLY_DATABASE_URL is %+v, want the owner's URL from a Secret", ref)
	}
	if existing := str(vals, "secrets", "existingSecret"); existing != "" {
		if ref.SecretKeyRef.Name != existing {
			t.Errorf("the migrations read the Secret %s, want %s", ref.SecretKeyRef.Name, existing)
		}
		return
	}
	for _, m := range r.of("Secret") {
		if m.meta.GetName() != ref.SecretKeyRef.Name {
			continue
		}
		a := m.meta.GetAnnotations()
		if a["helm.sh/hook"] != job.Annotations["helm.sh/hook"] || weight(t, a) >= weight(t, job.Annotations) {
			t.Errorf("the Secret %s the migrations read is made as %q weight %q, the Job as %q weight %q: hooks run before the release's resources exist, so it must be the same hook made first",
				m.meta.GetName(), a["helm.sh/hook"], a["helm.sh/hook-weight"], job.Annotations["helm.sh/hook"], job.Annotations["helm.sh/hook-weight"])
		}
		return
	}
	t.Errorf("the migrations read the Secret %s, which the chart does not make", ref.SecretKeyRef.Name)
}

func weight(t *testing.T, annotations map[string]string) int {
	t.Helper()
	var w int
	if _, err := fmt.Sscan(annotations["helm.sh/hook-weight"], &w); err != nil {
		t.Errorf("hook weight %q: %v", annotations["helm.sh/hook-weight"], err)
	}
	return w
}

// checkEnv: every TALLY_* variable a container is given is one its
// command reads, as its --help names it, and every secretKeyRef names an
// entry of a Secret the chart makes (or the existing one).
func checkEnv(t *testing.T, r rendered, vals map[string]any, help map[string]string) {
	t.Helper()
	for _, w := range r.workloads() {
		for _, c := range w.pod.Spec.Containers {
			cmd := strings.Join(c.Args, " ")
			h, ok := help[cmd]
			if !ok {
				t.Errorf("%s: container %s runs tally %s, a command this test does not know", w.m, c.Name, cmd)
				continue
			}
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "TALLY_") && !regexp.MustCompile(`\$`+regexp.QuoteMeta(e.Name)+`\b`).MatchString(h) {
					t.Errorf("%s: container %s sets %s, which tally %s does not read (not in its --help)", w.m, c.Name, e.Name, cmd)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					checkSecretRef(t, r, vals, w.m, e.ValueFrom.SecretKeyRef.Name, []corev1.KeyToPath{{Key: e.ValueFrom.SecretKeyRef.Key}})
				}
			}
		}
	}
}

// daemonsHelp builds tally from this checkout and returns the --help of
// each command the chart runs, by its arguments.
func daemonsHelp(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "tally")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build tally: %v\n%s", err, out)
	}
	help := map[string]string{}
	for _, cmd := range []string{"intake", "projector", "migrate up"} {
		args := append(strings.Fields(cmd), "--help")
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tally %s --help: %v\n%s", cmd, err, out)
		}
		help[cmd] = string(out)
	}
	return help
}

// leaves are the dotted paths of a values tree's leaves (a list or an
// empty table is a leaf).
func leaves(prefix string, v any, out map[string]bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		out[prefix] = true
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		leaves(p, sub, out)
	}
}

// TestCIValuesSetEveryOption: each setting of values.yaml is set by some
// file of ci/, so rendering them renders every option; a setting added to
// the chart without being set there fails here.
func TestCIValuesSetEveryOption(t *testing.T) {
	t.Parallel()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	defaults, set := map[string]bool{}, map[string]bool{}
	leaves("", map[string]any(chrt.Values), defaults)
	for name, vals := range valueSets(t) {
		if name != "default values" {
			leaves("", vals, set)
		}
	}
	var unset []string
	for p := range defaults {
		// A default leaf is covered by the same path, by a table set whole
		// above it, or by settings below it (an empty table filled in).
		covered := false
		for q := range set {
			covered = covered || q == p || strings.HasPrefix(q, p+".") || strings.HasPrefix(p, q+".")
		}
		if !covered {
			unset = append(unset, p)
		}
	}
	sort.Strings(unset)
	if len(unset) > 0 {
		t.Errorf("no file of %s/ci sets these settings of values.yaml:\n%s", chartDir, strings.Join(unset, "\n"))
	}
}
