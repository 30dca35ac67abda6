package monitor_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestGCPercentUnlessGOGC: README's `gc_percent: 50  # Go GC target of
// keeper processes (GOGC wins when set)`. An `xkeeper serve` process runs
// with keeper.gc_percent as its GC target when GOGC is not set, and with
// GOGC when it is, as the Go runtime's own go_gc_gogc_percent on the
// member's /metrics shows.
func TestGCPercentUnlessGOGC(t *testing.T) {
	gogc := func(t *testing.T) float64 {
		pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 1, Keeper: func(k *config.Keeper) { k.GCPercent = 70 }})
		base := "http://" + pc.Config.Shards[0].Members[0].HTTPAddr
		require.Eventually(t, func() bool { return status(t, base+"/live") == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
		return value(t, scrape(t, base), "go_gc_gogc_percent", "")
	}
	t.Run("GOGC unset", func(t *testing.T) {
		t.Setenv("GOGC", "")
		require.NoError(t, os.Unsetenv("GOGC")) // the member inherits this process's environment
		assert.Equal(t, 70.0, gogc(t), "keeper.gc_percent")
	})
	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "180")
		assert.Equal(t, 180.0, gogc(t), "GOGC wins")
	})
}
