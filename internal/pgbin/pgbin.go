// Package pgbin finds the installed PostgreSQL server binaries and readies
// a directory for a private server run by them, for the tests' and the
// benchmarks' private PostgreSQL servers (scripts/services.sh does the
// same for make run).
package pgbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrMissing: no initdb and pg_ctl were found.
var ErrMissing = errors.New("the PostgreSQL server binaries (initdb, pg_ctl) are not installed: install them (sudo apt-get install -y postgresql)")

// Dir is the directory of initdb and pg_ctl: the newest
// /usr/lib/postgresql/*/bin that has them, or the directory of initdb on
// PATH; ErrMissing when there is none.
func Dir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrMissing
}

// GiveToPostgres makes the postgres OS user the owner of dir, as a server
// run by root (through runuser) needs: PostgreSQL refuses to run as root.
func GiveToPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("a private PostgreSQL started as root runs as the OS user postgres, which does not exist: "+
			"create it (useradd --system --no-create-home postgres): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("give %s to the postgres user: %w", dir, err)
	}
	return nil
}
