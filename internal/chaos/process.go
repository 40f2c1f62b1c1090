package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles the tally command of the module that holds the working
// directory into dir and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("find the module root: not inside a Go module")
	}
	bin := filepath.Join(dir, "tally")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// Process is one daemon the suite runs as a child process: the tally
// binary with a subcommand and flags. It runs in a process group of its
// own, so Kill reaches it and nothing else, and appends its output to a
// log file that survives restarts.
type Process struct {
	Name    string   // for messages: "projector-1"
	Path    string   // the binary
	Args    []string // subcommand and flags
	Env     []string // added to the environment
	LogPath string
	// Health is the URL that answers 200 once the process is ready; empty:
	// Start does not wait.
	Health string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd exited
	exit   error
	starts int // times started
	kills  int // times killed with SIGKILL
}

// Starts is the number of times the process was started.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Kills is the number of times the process was killed with SIGKILL.
func (p *Process) Kills() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kills
}

// Start starts the process and waits (at most 30s) until its health URL
// answers 200. Starting a running process does nothing.
func (p *Process) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		return nil
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("%s: open log: %w", p.Name, err)
	}
	fmt.Fprintf(logf, "=== %s start #%d at %s\n", p.Name, p.starts+1, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.mu.Unlock()
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	p.starts++
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(done)
	}()
	p.mu.Unlock()
	if p.Health == "" {
		return nil
	}
	return p.waitHealthy(ctx, done, 30*time.Second)
}

func (p *Process) waitHealthy(ctx context.Context, done <-chan struct{}, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Health, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready (%v); log:\n%s", p.Name, p.exitErr(), p.LogTail(40))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s within %s; log:\n%s", p.Name, p.Health, limit, p.LogTail(40))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *Process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Kill sends SIGKILL to the process group, as a crash would, and waits for
// the process to exit. Killing a stopped process does nothing.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL, 0)
}

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *Process) Stop(grace time.Duration) {
	p.signal(syscall.SIGTERM, grace)
}

func (p *Process) signal(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-done
	p.mu.Lock()
	if sig == syscall.SIGKILL {
		p.kills++
	}
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
}

// Exited reports whether the process, started and not stopped by Kill or
// Stop, has exited by itself, and how.
func (p *Process) Exited() (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		return true, p.exitErr()
	default:
		return false, nil
	}
}

// LogTail returns the last n lines of the process's log.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
