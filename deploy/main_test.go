package deploy

import (
	"os"
	"testing"

	"tally/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
