// Package monitor serves a keeper member's operator endpoints over HTTP:
// Prometheus metrics (/metrics), readiness (/ready) and liveness (/live),
// and Go's profiles (/debug/pprof/).
package monitor

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xkeeper/xkeeper/keeper"
)

// MaxApplyLag is how many committed entries a member may have left to
// apply and still be ready.
const MaxApplyLag = 1000

// Monitor exports one member's state.
type Monitor struct {
	m          *keeper.Member
	shard      string
	maxContact time.Duration
	reg        *prometheus.Registry
	dirs       []DirGauge
}

// DirGauge is a gauge of how many znodes lie Depth levels below Dir on
// the shard: how the workflows above the keeper (partition moves, the S3
// catalog) are seen from it.
type DirGauge struct {
	Name, Help string
	Dir        string
	Depth      int
	desc       *prometheus.Desc
}

// New returns the monitor of member m, which belongs to shard; a follower
// that has not heard from its leader for longer than maxContact (the
// election timeout) is not ready. dirs are read at every scrape.
func New(m *keeper.Member, shard string, maxContact time.Duration, dirs ...DirGauge) *Monitor {
	for i := range dirs {
		dirs[i].desc = prometheus.NewDesc(dirs[i].Name, dirs[i].Help, nil, nil)
	}
	mo := &Monitor{m: m, shard: shard, maxContact: maxContact, reg: prometheus.NewRegistry(), dirs: dirs}
	r := prometheus.WrapRegistererWith(prometheus.Labels{"shard": shard, "member": m.Replica.ID()}, mo.reg)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Server.Latency(), (*stateCollector)(mo))
	r.MustRegister(m.Replica.Collectors()...)
	return mo
}

// Register adds collectors of the member's process (such as its node's
// client endpoint) to what the monitor exports, with the member's labels.
func (mo *Monitor) Register(cs ...prometheus.Collector) error {
	r := prometheus.WrapRegistererWith(prometheus.Labels{"shard": mo.shard, "member": mo.m.Replica.ID()}, mo.reg)
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the endpoints.
func (mo *Monitor) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(mo.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if why := mo.NotReady(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// NotReady says why the member should not take clients now, or "" if it
// should: its Raft log writes return and succeed, and it is the leader, or
// a follower in touch with its leader that has applied nearly everything
// it knows to be committed.
func (mo *Monitor) NotReady() string {
	if d := mo.m.Replica.LogStall(); d > 0 {
		return fmt.Sprintf("the Raft log write has not returned for %v", d.Round(time.Millisecond))
	}
	if err := mo.m.Replica.LogFailed(); err != nil {
		return "the last Raft log write failed: " + err.Error()
	}
	st := mo.m.Replica.Stats()
	// Not raft's applied_index: it counts entries handed to the state
	// machine, which may have thousands queued (Replica.StateApplied).
	lag := num(st["commit_index"]) - float64(mo.m.Replica.StateApplied())
	switch {
	case st["state"] == "Leader":
		return ""
	case st["state"] != "Follower" || mo.m.Replica.Leader() == "":
		return "no leader (" + st["state"] + ")"
	case lag > MaxApplyLag:
		return fmt.Sprintf("%.0f committed entries to apply", lag)
	}
	if c := st["last_contact"]; c != "0" {
		d, err := time.ParseDuration(c)
		if err != nil || d > mo.maxContact {
			return "no contact with the leader for " + c
		}
	}
	return ""
}

func num(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

// Serve listens on addr and serves the monitor until stop is called; it
// returns the address it listens on.
func Serve(addr string, mo *Monitor, log *slog.Logger) (stop func(), at net.Addr, err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("monitor: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mo.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("monitor stopped", "err", err)
		}
	}()
	return func() { srv.Close() }, l.Addr(), nil
}
