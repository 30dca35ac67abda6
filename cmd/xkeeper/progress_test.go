package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
)

// TestCopyProgress: a cross-server copy (ca to cb) reports its rows as
// ClickHouse copies them; on a terminal the bar ends at every row of the
// partition, and with the output piped, or under --format json, nothing
// is drawn.
func TestCopyProgress(t *testing.T) {
	e := movetest.Start(t)
	const rows = 30_000
	src := e.NewTable(t, "ca:p.src", true, rows, 1)
	for i, c := range []struct {
		terminal bool
		format   string
		drawn    bool
	}{{true, "text", true}, {false, "text", false}, {true, "json", false}} {
		dst := e.NewTable(t, fmt.Sprintf("cb:p.dst%d", i), true, 0, 2)
		var out bytes.Buffer
		bar := newCopyBar(&globals{format: c.format}, &out, c.terminal)
		var last, total uint64
		m := movepart.New(e.Config, movetest.Router(t, e.Config), movepart.Options{Progress: func(copied, all uint64) {
			last, total = copied, all
			bar.update(copied, all)
		}})
		plan, err := m.Plan(movetest.Ctx(t), movepart.Request{Kind: movepart.Attach, From: src.Ref, To: dst.Ref, Partition: movetest.Partition})
		require.NoError(t, err)
		_, err = m.Run(movetest.Ctx(t), plan)
		require.NoError(t, err)
		bar.finish()
		m.Close()
		assert.Equal(t, uint64(rows), total, "the copy's size")
		assert.Equal(t, uint64(rows), last, "the last report counts every row")
		if c.drawn {
			assert.Contains(t, out.String(), "copying rows")
			assert.Contains(t, out.String(), fmt.Sprintf("%d/%d", rows, rows))
		} else {
			assert.Empty(t, out.String(), "terminal %v, format %s", c.terminal, c.format)
		}
	}
}
