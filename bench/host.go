package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"tally/internal/procstat"

	"github.com/jackc/pgx/v5"
)

func machine() string {
	return fmt.Sprintf("%d CPUs, %s, %s/%s", runtime.NumCPU(), memTotal(), runtime.GOOS, runtime.GOARCH)
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "? memory"
	}
	var kb float64
	fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%f", &kb)
	return fmt.Sprintf("%.0f GiB", kb/1024/1024)
}

func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "go ?"
	}
	return strings.TrimSpace(string(out))
}

// loadAvg is the one-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// versions names the servers.
func (e *env) versions(ctx context.Context) string {
	pg, rd := "PostgreSQL ?", "Redis ?"
	if conn, err := pgx.Connect(ctx, e.adminURL); err == nil {
		var v string
		if conn.QueryRow(ctx, `SHOW server_version`).Scan(&v) == nil {
			pg = "PostgreSQL " + strings.Fields(v)[0]
		}
		conn.Close(ctx)
	}
	if info, err := e.rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				rd = "Redis " + v
			}
		}
	}
	return pg + ", " + rd
}

// cpuSeconds is the user and system CPU time pid has used, in seconds.
func cpuSeconds(pid int) float64 { return procstat.CPUSeconds(pid) }

// backendCPU is the CPU time the PostgreSQL backends connected to
// database db have used, in seconds (0 when the server is not local). It
// asks over a connection of its own, to another database.
func (e *env) backendCPU(ctx context.Context, db string) float64 {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, db)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	var sum float64
	for _, pid := range pids {
		sum += cpuSeconds(int(pid))
	}
	return sum
}

// loadAvg3 is the 1, 5 and 15-minute load averages.
func loadAvg3() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// redisCPU is the CPU time the Redis server has used, in seconds.
func (e *env) redisCPU(ctx context.Context) float64 {
	info, err := e.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// cpuSnap is the CPU time, in seconds, each part of a pipeline under
// tally loadtest has used up to one moment.
type cpuSnap struct {
	intakes   float64 // every intake's, summed
	projector float64
	postgres  float64 // the backends connected to the pipeline's database
	redis     float64 // the whole Redis server's
	client    float64 // tally loadtest's
}

// pipelineCPU is the CPU time of p's processes, of the PostgreSQL
// backends connected to db, of Redis, and of the process client.
func (e *env) pipelineCPU(ctx context.Context, p *pipeline, db string, client int) cpuSnap {
	s := e.serverCPU(ctx, p, db)
	s.client = cpuSeconds(client)
	return s
}

// serverCPU is the CPU time of p's intakes (or of the one server in
// their place), of its projector when it has one, of the PostgreSQL
// backends connected to db, and of Redis; the client's is left to the
// caller.
func (e *env) serverCPU(ctx context.Context, p *pipeline, db string) cpuSnap {
	var s cpuSnap
	for _, ip := range p.intakes {
		s.intakes += cpuSeconds(ip.cmd.Process.Pid)
	}
	if p.projector != nil {
		s.projector = cpuSeconds(p.projector.cmd.Process.Pid)
	}
	s.postgres = e.backendCPU(ctx, db)
	s.redis = e.redisCPU(ctx)
	return s
}

// perVote is the CPU per vote, in µs, of each part from the snapshot a to
// s, n votes apart.
func (s cpuSnap) perVote(a cpuSnap, n int64) cpuPerVote {
	if n <= 0 {
		return cpuPerVote{}
	}
	us := func(from, to float64) float64 { return 1e6 * (to - from) / float64(n) }
	return cpuPerVote{votes: n,
		intakes: us(a.intakes, s.intakes), projector: us(a.projector, s.projector),
		postgres: us(a.postgres, s.postgres), redis: us(a.redis, s.redis), client: us(a.client, s.client)}
}
