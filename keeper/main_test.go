package keeper_test

import (
	"github.com/stretchr/testify/require"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// connectZK opens a go-zookeeper session and waits until it is usable.
func connectZK(t testing.TB, servers []string, timeout time.Duration) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return conn
			}
		case <-deadline:
			t.Fatalf("no session with %v after 15s", servers)
		}
	}
}
