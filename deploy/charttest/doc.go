// Package charttest holds tally's Helm chart (deploy/helm) to what
// Kubernetes and the tally binary accept. It is a module of its own, so
// that helm's and Kubernetes' modules stay out of the product's go.mod;
// make test runs it (go -C deploy/charttest test ./...).
//
// The package has no code. Its tests use helm's Go packages, as `helm
// lint --strict` and `helm template` do (the chart loader, the linter and
// the template engine), rather than the helm command, whose build costs
// far more:
//
//   - the chart lints with no warning for the default values and for
//     every file of deploy/helm/ci (the options on), and values that
//     values.schema.json refuses (a misspelled or mistyped field) fail;
//   - every manifest it renders decodes strictly into the Kubernetes API
//     types (k8s.io/api): an unknown or repeated field fails. The
//     ServiceMonitor, whose type is not in k8s.io/api, decodes as strictly
//     into the local struct serviceMonitor, which holds the fields of
//     monitoring.coreos.com/v1 the chart uses;
//   - the rendered objects fit together: every Service, PodDisruptionBudget
//     and ServiceMonitor selects pods or Services that the chart makes, on
//     ports they name; probes, env and volumes refer to ports, Secrets and
//     entries that exist; every pod runs as non-root on a read-only root
//     file system with no capability and the runtime's seccomp profile;
//     the migrations run as a pre-install/pre-upgrade hook after the
//     Secret they read;
//   - every TALLY_* variable a container is given is one its daemon
//     reads, as `tally intake --help` (projector, migrate up) names it,
//     from a tally binary built from this checkout;
//   - the README's commands for the chart are three or fewer, and every
//     value, release name and Deployment they name is the chart's.
//
// Files:
//
//   - chart_test.go: lint, render, strict decoding, and the checks of
//     the rendered objects;
//   - readme_test.go: README.md's "Deploying" paragraph on the chart.
package charttest
