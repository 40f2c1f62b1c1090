package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-retry"
)

// This file owns the live measurement's viewers: the Server-Sent Events
// streams of a poll opened from this process (openViewers), each read
// into its results events, and the wait until every one saw a total.

// sseEvent is one results event a viewer read: when, and the total it
// counts.
type sseEvent struct {
	at    time.Time
	total int64
}

// viewer is one open stream.
type viewer struct {
	events []sseEvent // read by its goroutine; by others once done is closed
	err    error
	seen   atomic.Int64 // the total of the latest event; -1 before the first
	done   chan struct{}
}

// viewers are the streams openViewers opened; close ends them.
type viewers struct {
	all    []*viewer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// openViewers opens n streams of poll, 50 being opened at a time, and
// waits up to 30s until each has read the poll's current state.
func openViewers(ctx context.Context, addr, poll string, n int) (*viewers, error) {
	vctx, cancel := context.WithCancel(ctx)
	vs := &viewers{cancel: cancel}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, ResponseHeaderTimeout: 10 * time.Second}}
	opening := make(chan struct{}, 50)
	for range n {
		v := &viewer{done: make(chan struct{})}
		v.seen.Store(-1)
		vs.all = append(vs.all, v)
		opening <- struct{}{}
		vs.wg.Go(func() {
			defer close(v.done)
			v.err = v.read(vctx, client, "http://"+addr+"/v1/polls/"+poll+"/live", func() { <-opening })
		})
	}
	if err := vs.waitTotal(ctx, 0, 30*time.Second); err != nil {
		vs.close()
		return nil, err
	}
	return vs, nil
}

// read opens the stream at url, calls opened once it answered (or
// failed), and reads its results events until ctx ends.
func (v *viewer) read(ctx context.Context, client *http.Client, url string, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		opened()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	opened()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	br := bufio.NewReaderSize(resp.Body, 8<<10)
	var event string
	var data []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read %s: %w", url, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if event == "results" {
				var r struct {
					Total int64 `json:"total"`
				}
				if err := json.Unmarshal(data, &r); err != nil {
					return fmt.Errorf("results event of %s: %w", url, err)
				}
				v.events = append(v.events, sseEvent{at: time.Now(), total: r.Total})
				v.seen.Store(r.Total)
			}
			event, data = "", data[:0]
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data, line[len("data: "):]...)
		}
	}
}

// errBehind marks a wait for viewers that have not all caught up.
var errBehind = errors.New("viewers behind")

// waitTotal waits up to limit until every viewer read an event of a total
// of at least n; a viewer that ended fails it.
func (vs *viewers) waitTotal(ctx context.Context, n int64, limit time.Duration) error {
	behind := 0
	err := retry.Do(ctx, retry.WithMaxDuration(limit, retry.NewConstant(20*time.Millisecond)), func(ctx context.Context) error {
		behind = 0
		for _, v := range vs.all {
			select {
			case <-v.done:
				return fmt.Errorf("a live viewer ended: %v", v.err)
			default:
			}
			if v.seen.Load() < n {
				behind++
			}
		}
		if behind > 0 {
			return retry.RetryableError(errBehind)
		}
		return nil
	})
	if errors.Is(err, errBehind) {
		return fmt.Errorf("%d of %d live viewers did not see a total of %d within %s", behind, len(vs.all), n, limit)
	}
	return err
}

// close ends every stream and waits for its reader. Closing twice is safe.
func (vs *viewers) close() {
	vs.cancel()
	vs.wg.Wait()
}
