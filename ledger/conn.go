package ledger

import (
	"bufio"
	"io"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// readBuffer is the buffer a connection configured by BufferedReads
// reads PostgreSQL's messages through.
const readBuffer = 64 << 10

// BufferedReads makes the connections of cfg read PostgreSQL's messages
// through a buffer of 64 kB, rather than in pgx's reads of at most 8 kB.
// A result of many rows (a rebuild's, an export's) then comes in as many
// bytes a read system call as PostgreSQL has sent by then, up to 64 kB:
// fewer reads, each of which costs more than copying its bytes once more
// (a rebuild of 2M single choices: about 4% less of the client's CPU,
// BENCHMARKS.md). A read still returns what has come, without waiting
// for more. Each connection holds 64 kB more. tally's commands open
// their pools with it.
func BufferedReads(cfg *pgconn.Config) {
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, readBuffer), w)
	}
}
