package testenv

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
)

// Embedded is a cluster of in-process members on loopback, in a temporary
// directory, for runnable examples (which have no testing.T): the same
// kind of cluster as `xkeeper local`, with test Raft timings.
type Embedded struct {
	Config  *config.Cluster
	dir     string
	members []*keeper.Member
}

// StartEmbedded starts shards × members members and waits until every
// shard has a leader. Close stops them and removes their data.
func StartEmbedded(shards, members int) (*Embedded, error) {
	dir, err := os.MkdirTemp("", "xkeeper-example-")
	if err != nil {
		return nil, err
	}
	e := &Embedded{dir: dir}
	ports, err := config.FreeLoopbackPorts(2 * shards * members)
	if err == nil {
		e.Config, err = config.Layout(dir, shards, members, ports, TestKeeper(false))
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, sh := range e.Config.Shards {
		for _, m := range sh.Members {
			km, err := keeper.Start(e.Config, m.ID, keeper.Options{Logger: quiet, Bootstrap: true})
			if err != nil {
				e.Close()
				return nil, err
			}
			e.members = append(e.members, km)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); !e.led(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.Close()
			return nil, errors.New("testenv: no leader in every shard after 20s")
		}
	}
	return e, nil
}

// led reports whether every member knows a leader.
func (e *Embedded) led() bool {
	for _, m := range e.members {
		if m.Replica.Leader() == "" {
			return false
		}
	}
	return true
}

// Servers returns a shard's client addresses.
func (e *Embedded) Servers(shard string) []string {
	sh, err := e.Config.Shard(shard)
	if err != nil {
		panic(fmt.Sprintf("testenv: %v", err))
	}
	return sh.ClientAddrs()
}

// Close stops every member and removes the data directory.
func (e *Embedded) Close() {
	for _, m := range e.members {
		m.Close()
	}
	os.RemoveAll(e.dir)
}
