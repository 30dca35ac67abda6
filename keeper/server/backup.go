package server

import (
	"net"
	"time"
)

// backup answers a member's link that asks for a backup of the shard
// (replica.BackupMagic): 0 and the backup, or 1 and why there is none.
func (s *Server) backup(c net.Conn) {
	w := &statusWriter{c: c}
	h, err := s.replica.Backup(w)
	switch {
	case err != nil && !w.started:
		s.log.Warn("backup refused", "err", err)
		c.Write(append([]byte{1}, err.Error()...))
	case err != nil:
		s.log.Warn("backup cut short", "err", err) // the reader sees it end early
	default:
		s.log.Info("backup sent", "zxid", h.Zxid, "to", c.RemoteAddr().String())
	}
}

// statusWriter writes the 0 that says a backup follows before its first
// byte, and gives up on a reader that stops reading (a snapshot held open
// keeps the old tree's nodes alive).
type statusWriter struct {
	c       net.Conn
	started bool
}

// stalledReader is how long a backup's reader may take no bytes.
const stalledReader = 30 * time.Second

func (s *statusWriter) Write(p []byte) (int, error) {
	s.c.SetWriteDeadline(time.Now().Add(stalledReader))
	if !s.started {
		s.started = true
		if _, err := s.c.Write([]byte{0}); err != nil {
			return 0, err
		}
	}
	return s.c.Write(p)
}
