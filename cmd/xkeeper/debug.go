package main

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
)

// serveDebug serves Go's profiles (/debug/pprof/) on addr, for finding
// where a keeper's time goes; "" serves nothing. It returns the stop.
func serveDebug(addr string) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usage(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("debug server stopped", "err", err)
		}
	}()
	slog.Info("profiles at http://" + l.Addr().String() + "/debug/pprof/")
	return func() { srv.Close() }, nil
}
