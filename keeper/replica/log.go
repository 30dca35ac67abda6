package replica

import (
	"bytes"
	"context"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogWriter carries hashicorp/raft's hclog lines into the project's
// slog logger, so one logging style reaches the operator.
type hclogWriter struct{ log *slog.Logger }

func (w hclogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimSpace(p), []byte("\n")) {
		s := string(line)
		level := slog.LevelInfo
		switch {
		case strings.Contains(s, "[ERROR]"):
			level = slog.LevelError
		case strings.Contains(s, "[WARN]"):
			level = slog.LevelWarn
		case strings.Contains(s, "[DEBUG]"), strings.Contains(s, "[TRACE]"):
			level = slog.LevelDebug
		}
		if strings.Contains(s, errLogStalled.Error()) {
			// raft logs each append and heartbeat the stall refuses; the
			// stall watch logs the stall once, and its end.
			level = slog.LevelDebug
		}
		w.log.Log(context.Background(), level, s)
	}
	return len(p), nil
}

func newHclog(log *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: hclogWriter{log}, DisableTime: true})
}
