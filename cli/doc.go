// Package cli is the tally command: it reads flags and TALLY_* environment
// variables, builds the logger and connections, and runs the daemons and
// admin commands of packages intake, projector and ledger. It is the only
// package that reads the environment.
//
// Exit codes: 0 success, 1 a check failed (rebuild found a difference), 2
// an error (bad flags, unreachable server). Run never calls os.Exit; main
// does, and handles the signals.
//
// One file per command noun; each command's Action is a named function in
// its file:
//
//   - app.go: Run, the exit codes, the app with its list of commands, the
//     flags every command shares (commonFlags), the logger and the
//     Prometheus registry of a daemon.
//   - conns.go: opening PostgreSQL (the ledger) and Redis from the shared
//     flags (--redis-mode picks single, sentinel or cluster), and the
//     start-up wait (--startup-wait) that keeps trying them while a daemon
//     starts, except after an answer trying again will not change;
//     conn_faults.go: those answers (a refused login, a missing database,
//     TLS to a server without it, or none to a server that speaks only
//     TLS), the URLs' schemes checked before any connection, and
//     passwords kept out of messages.
//   - settings.go: a daemon's flags, each bound to its field of the
//     package's Config (declared once: name, environment variable,
//     default, field), checked before anything connects (a bad value
//     exits 2 naming the flag; 0 where the default is not zero is
//     refused), and the Config's errors told as the flags'. -1 is no bound.
//   - version.go: what tally --version prints, stamped by make image.
//   - output.go: --format, JSON output and the aligned tables people read.
//   - args.go: lets positional arguments come before or after the flags.
//   - daemon.go: the process-wide settings of the daemons: the garbage
//     collector's target and go-redis' log lines through slog.
//   - notify.go: systemd's readiness protocol (NOTIFY_SOCKET, READY=1 and
//     STOPPING=1) for the daemons run with Type=notify, without libsystemd.
//   - migrate.go: tally migrate (goose on the embedded migrations).
//   - intake.go: tally intake, the HTTP daemon, and its Redis version check.
//   - projector.go: tally projector, the daemon, and its /metrics server.
//   - status.go: tally status, the backlog and dead letters per stream shard.
//   - deadletter.go: tally deadletter list, show, replay and purge.
//   - rebuild.go: tally rebuild, the ledger against the projection.
//   - export.go: tally export and tally import, the commands.
//   - importer.go: the parallel import behind tally import, split by poll
//     so that each poll's rows keep the file's order (and its log's roots).
//   - jsonl.go: the JSON-lines event format export writes and import reads.
//   - progress.go: the progress line of import, export and rebuild on a
//     terminal (count, rate, time left), off elsewhere and with --quiet.
//   - poll.go: tally poll create, close, list and show; poll_from.go:
//     tally poll create --from FILE, many polls from JSON lines, each line
//     answered as POST /v1/polls answers its poll.
//   - principal.go: tally principal add, revoke and list.
//   - loadtest.go: tally loadtest, on package internal/loadtest.
//   - logkey.go: tally log, its key generate (the log's signing key) and
//     checkpoint (the latest signed checkpoint of a poll).
//   - logproof.go: tally log prove and consistency, a vote's receipt and a
//     consistency proof from the database.
//   - audit.go: tally audit verify and receipt, the offline checks of
//     package audit (no database, no network).
package cli
