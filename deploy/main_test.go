package deploy

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"tally/internal/chaos"
	"tally/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binDir holds the tally binary the package's tests share.
var binDir string

// buildTally builds the tally command once for the package's tests: each
// test built its own before, and three builds at once on a loaded machine
// outlasted their bound (go build killed at 2 and 3 minutes).
var buildTally = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tally-deploy-")
	if err != nil {
		return "", err
	}
	binDir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return chaos.Build(ctx, dir)
})

// tallyBinary is the path of the shared tally binary; it fails t when the
// build failed.
func tallyBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildTally()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
