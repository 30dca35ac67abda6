package replica

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRaftLinesKeepTheirLevel: raft's hclog lines reach slog at their own
// level, except its reports of sends the log stall refused, which would
// repeat at error level for as long as the disk hangs: those are debug.
func TestRaftLinesKeepTheirLevel(t *testing.T) {
	var out bytes.Buffer
	log := newHclog(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), "raft")
	log.Error("failed to appendEntries to", "peer", "b", "error", "boom")
	log.Warn("heartbeat timeout reached")
	log.Error("failed to heartbeat to", "peer", "b", "error", errLogStalled)
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if assert.Len(t, lines, 3) {
		assert.Contains(t, string(lines[0]), "level=ERROR")
		assert.Contains(t, string(lines[1]), "level=WARN")
		assert.Contains(t, string(lines[2]), "level=DEBUG")
	}
}
