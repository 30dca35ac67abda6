package keeper_test

import (
	"github.com/stretchr/testify/require"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/xkeeper/xkeeper/testenv"
)

func TestSmoke(t *testing.T) {
	c := testenv.StartShard(t, 3)
	conn, ev, err := zk.Connect(c.Servers("a"), 4*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	defer conn.Close()
	deadline := time.After(10 * time.Second)
	for st := range ev {
		if st.State == zk.StateHasSession {
			break
		}
		select {
		case <-deadline:
			t.Fatal("no session")
		default:
		}
	}
	p, err := conn.Create("/x", []byte("hi"), 0, zk.WorldACL(zk.PermAll))
	if err != nil || p != "/x" {
		t.Fatalf("create: %q %v", p, err)
	}
	data, st, err := conn.Get("/x")
	if err != nil || string(data) != "hi" {
		t.Fatalf("get: %q %v", data, err)
	}
	t.Logf("stat %+v", st)
	kids, _, err := conn.Children("/")
	t.Logf("children %v %v", kids, err)
	for i := 0; i < 3; i++ {
		p, err := conn.Create("/x/s-", nil, zk.FlagSequence|zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		t.Log(p, err)
	}
	_, _, wch, err := conn.GetW("/x")
	require.NoError(t, err)
	if _, err := conn.Set("/x", []byte("b"), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-wch:
		t.Logf("event %+v", e)
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}
