// Package deploy holds what watches tally's daemons in production, beside
// the binary: a Grafana dashboard (grafana/tally.json), Prometheus alert
// rules with their unit tests (prometheus/alerts.yml,
// prometheus/alerts_test.yml) and an example scrape configuration whose
// job names the rules use (prometheus/prometheus.yml). docs/dashboards.md
// says how to load them and what to do when an alert fires. It also holds
// what runs the daemons: systemd units for intake and projector
// (systemd/tally-intake.service, systemd/tally-projector.service) with the
// environment file they share (systemd/tally.env); README.md, "Deploying",
// says how to install them. The OCI image is built by scripts/image.sh
// (make image), which this package's tests run. The Helm chart
// (helm/) is tested in a module of its own, deploy/charttest, so that
// helm's and Kubernetes' packages stay out of tally's go.mod.
//
// The package has no code. Its tests hold the files to what the daemons
// really do:
//
//   - every PromQL expression of the dashboard and of the rules parses,
//     and every metric it names is one that a running `tally intake` or
//     `tally projector` exports (a histogram's _bucket, _sum and _count
//     series included), read from their /metrics after a vote went
//     through; a made-up name is refused;
//   - promtool checks the rules, runs their unit tests, checks the scrape
//     configuration, and lints both daemons' /metrics;
//   - the dashboard is one Grafana imports as is, and every panel reads
//     the data source variable;
//   - every alert has a section in docs/dashboards.md, and every link from
//     there into docs/operations.md names a heading that exists.
//   - the systemd units pass `systemd-analyze verify`, each has an
//     exposure of 2.0 or less in `systemd-analyze security`, both read
//     the one environment file, hand the daemons their keys as systemd
//     credentials, and set only variables the daemons read;
//   - make image built twice from one commit gives one digest and one
//     SBOM; the image runs as a user that is not root, its labels name
//     the commit, its layer is owned by root and timed at the commit;
//     unpacked by umoci, its static binary migrates a database and runs
//     intake and projector, which count a vote; the SBOM names the
//     modules `go version -m` finds in that binary.
//
// The promtool comes from scripts/promtool.sh, which extracts it from
// Debian's prometheus package when none is installed; a test that cannot
// get one fails, saying why.
// systemd-analyze and umoci come from scripts/tool.sh, which installs
// Debian's package when one is missing and the tests run as root; a test
// that cannot have it skips, saying how to install it.
//
// Files:
//
//   - promql_test.go: the metric names of an expression and the check
//     against what the daemons export;
//   - daemons_test.go: the tally binary's intake and projector, run on a
//     fresh database, and the checks against their /metrics;
//   - dashboard_test.go: the dashboard's shape and expressions;
//   - rules_test.go: the alert rules' expressions and the promtool runs;
//   - docs_test.go: docs/dashboards.md against the rules and
//     docs/operations.md.
//   - systemd_test.go: the systemd units, verified and scored.
//   - image_test.go: the OCI image, built twice, read, unpacked and run.
package deploy
