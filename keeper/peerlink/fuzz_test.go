package peerlink

import (
	"bytes"
	"net"
	"testing"
)

// FuzzServe feeds arbitrary bytes to the serving end of a link as a
// stranger would: it never panics and never accepts.
func FuzzServe(f *testing.F) {
	a, err := New(Config{Secret: "fuzz-cluster-secret"}, discard())
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(version + string(bytes.Repeat([]byte{1}, nonceLen)) + string(bytes.Repeat([]byte{2}, macLen))))
	f.Add([]byte("XKA1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		server, stranger := net.Pipe()
		defer stranger.Close()
		go func() {
			stranger.Write(b)
			stranger.Close()
		}()
		go drain(stranger)
		if c, err := a.Serve(server); err == nil {
			c.Close()
			t.Fatalf("a stranger's %x was accepted", b)
		}
	})
}

func drain(c net.Conn) {
	buf := make([]byte, 256)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}
