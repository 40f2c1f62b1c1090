package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sethvargo/go-retry"
)

// proc is a child process whose peak memory is followed.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // how it exited, once done is closed
	args []string
}

func start(ctx context.Context, logTo *os.File, args ...string) (*proc, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logTo, logTo
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), args: args}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// hwmMB is the process's peak resident set size so far (VmHWM), in MB (10^6 bytes).
func (p *proc) hwmMB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return n * 1024 / 1e6
		}
	}
	return 0
}

// stop sends SIGTERM and waits; SIGKILL after 30s.
func (p *proc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New(p.args[0] + " did not stop within 30s of SIGTERM")
	}
}

// errNoAnswer marks a health check that got no answer.
var errNoAnswer = errors.New("no answer")

// waitHealthy waits until the server p runs answers on addr: it asks
// every 50ms, for at most 15s, and stops early when p exits or ctx ends.
func waitHealthy(ctx context.Context, p *proc, addr string) error {
	b := retry.WithMaxDuration(15*time.Second, retry.NewConstant(50*time.Millisecond))
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v", p.args[0], p.err)
		default:
		}
		if httpGet(ctx, "http://"+addr+"/healthz") != nil {
			return retry.RetryableError(errNoAnswer)
		}
		return nil
	})
	if errors.Is(err, errNoAnswer) {
		return fmt.Errorf("%s did not answer on %s within 15s", strings.Join(p.args[:2], " "), addr)
	}
	return err
}

func httpGet(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
