package xshard_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bankRegression is a seed of one bank test that once failed, with the
// nemesis time it failed with (a seed reproduces a schedule of faults for
// one XKEEPER_BANK_FAULT only).
type bankRegression struct {
	test  string // TestBank, TestBankOnNodes or TestBankOnNodeProcesses
	seed  int64
	fault time.Duration
}

// bankRegressions are the seeds that ever failed. Each run of their test
// runs them first, before the budget's seeds from the clock, unless
// XKEEPER_SEED is set (a run reproducing one seed). To add one when a
// seed fails: copy the test, XKEEPER_SEED and XKEEPER_BANK_FAULT from the
// "reproduce:" line it printed into a line below, with what it found.
var bankRegressions = []bankRegression{
	// A woken leader (SIGSTOP) kept an entry of its own at the new
	// leader's first index: raft's heartbeat fast path (DESIGN-NOTES,
	// "Cross-shard transactions"). Fixed 2026-12-06.
	{"TestBankOnNodeProcesses", 50267, 3 * time.Second},
	{"TestBankOnNodeProcesses", 70765, 3 * time.Second},
}

// bankBudget is how long each bank test runs seeds by default
// (XKEEPER_BANK_BUDGET); with -short, one seed.
const bankBudget = 30 * time.Second

func envInt(t *testing.T, name string, def int64) int64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: not a duration of 0 or more (%v)", name, s, err)
	}
	return d
}

// bankSeeds runs the bank on clusters that start starts, for the seeds
// runSeeds picks, with the test's regression seeds first.
func bankSeeds(t *testing.T, fault time.Duration, start func(*testing.T) bankCluster) {
	var regressions []bankRegression
	for _, r := range bankRegressions {
		if r.test == t.Name() {
			regressions = append(regressions, r)
		}
	}
	runSeeds(t, fault, regressions, func(t *testing.T, seed int64, fault time.Duration) {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("reproduce: XKEEPER_SEED=%d XKEEPER_BANK_SEEDS=1 XKEEPER_BANK_FAULT=%s go test -race -count=1 -run '%s' ./xshard/", seed, fault, strings.Split(t.Name(), "/")[0])
			}
		})
		runBank(t, seed, fault, start(t))
	})
}

// runSeeds runs body as a subtest per seed: first the regression seeds,
// then seeds from XKEEPER_SEED or the clock, n, n+1, ..., each with fault
// of nemesis (XKEEPER_BANK_FAULT): exactly XKEEPER_BANK_SEEDS of them if
// set, else at least one and as many as fit in XKEEPER_BANK_BUDGET,
// counting the regression seeds' time too (a seed starts only if one as
// long as the longest yet would end within it). A run given XKEEPER_SEED
// reproduces that seed and skips the regressions. It stops at the first
// failing seed and logs every seed it runs.
func runSeeds(t *testing.T, fault time.Duration, regressions []bankRegression, body func(t *testing.T, seed int64, fault time.Duration)) {
	budget := bankBudget
	if testing.Short() {
		budget = 0
	}
	budget = envDuration(t, "XKEEPER_BANK_BUDGET", budget)
	fault = envDuration(t, "XKEEPER_BANK_FAULT", fault)
	count := envInt(t, "XKEEPER_BANK_SEEDS", 0)
	_, reproducing := os.LookupEnv("XKEEPER_SEED")
	base := envInt(t, "XKEEPER_SEED", time.Now().UnixNano()%1_000_000_000)

	began := time.Now()
	var ran []string
	var longest time.Duration
	defer func() {
		t.Logf("%d seeds in %v: %s", len(ran), time.Since(began).Round(time.Second), strings.Join(ran, ", "))
	}()
	run := func(seed int64, fault time.Duration, kind string) bool {
		t.Logf("seed %d (%s), nemesis for %v", seed, kind, fault)
		t0 := time.Now()
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { body(t, seed, fault) })
		took := time.Since(t0)
		longest = max(longest, took)
		verdict := "passed"
		if !ok {
			verdict = "FAILED"
		}
		ran = append(ran, fmt.Sprintf("%d (%s, %s, %v)", seed, kind, verdict, took.Round(time.Millisecond)))
		return ok
	}
	kind := "clock"
	if reproducing {
		kind, regressions = "XKEEPER_SEED", nil
	}
	for _, r := range regressions {
		if !run(r.seed, r.fault, "regression") {
			return
		}
	}
	for i := int64(0); ; i++ {
		switch {
		case count > 0 && i >= count:
			return
		case count == 0 && i > 0 && time.Since(began)+longest > budget:
			return
		}
		if !run(base+i, fault, kind) {
			return
		}
	}
}

// TestBankSeedPlan: the bank tests' seeds: a test's regression seeds
// first, with their own nemesis time, then seeds n, n+1, ... with the
// test's: one with a budget of 0, exactly XKEEPER_BANK_SEEDS if set, as
// many as fit in XKEEPER_BANK_BUDGET otherwise; XKEEPER_SEED names n and
// skips the regressions. The seeds here run a stand-in for the bank.
func TestBankSeedPlan(t *testing.T) {
	regressions := []bankRegression{{"TestX", 7, time.Second}, {"TestX", 9, 2 * time.Second}}
	plan := func(t *testing.T, env map[string]string, work time.Duration) (seeds []int64, faults []time.Duration) {
		for _, k := range []string{"XKEEPER_SEED", "XKEEPER_BANK_SEEDS", "XKEEPER_BANK_BUDGET", "XKEEPER_BANK_FAULT"} {
			t.Setenv(k, env[k]) // restored after the test
			if _, ok := env[k]; !ok {
				os.Unsetenv(k)
			}
		}
		runSeeds(t, 5*time.Second, regressions, func(t *testing.T, seed int64, fault time.Duration) {
			seeds, faults = append(seeds, seed), append(faults, fault)
			<-time.After(work) // a seed's run, standing in for the bank's
		})
		return seeds, faults
	}
	consecutive := func(t *testing.T, seeds []int64) {
		for i := 1; i < len(seeds); i++ {
			require.Equal(t, seeds[i-1]+1, seeds[i], "seeds %v", seeds)
		}
	}
	t.Run("no budget", func(t *testing.T) {
		seeds, faults := plan(t, map[string]string{"XKEEPER_BANK_BUDGET": "0"}, 0)
		require.Len(t, seeds, 3)
		require.Equal(t, []int64{7, 9}, seeds[:2], "the regressions first")
		require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}, faults)
	})
	t.Run("a count", func(t *testing.T) {
		seeds, _ := plan(t, map[string]string{"XKEEPER_BANK_SEEDS": "3", "XKEEPER_BANK_FAULT": "3s"}, 0)
		require.Len(t, seeds, 5)
		require.Equal(t, []int64{7, 9}, seeds[:2])
		consecutive(t, seeds[2:])
	})
	t.Run("a seed to reproduce", func(t *testing.T) {
		seeds, faults := plan(t, map[string]string{"XKEEPER_SEED": "100", "XKEEPER_BANK_SEEDS": "2", "XKEEPER_BANK_FAULT": "3s"}, 0)
		require.Equal(t, []int64{100, 101}, seeds)
		require.Equal(t, []time.Duration{3 * time.Second, 3 * time.Second}, faults)
	})
	t.Run("a budget", func(t *testing.T) {
		seeds, _ := plan(t, map[string]string{"XKEEPER_BANK_BUDGET": "2s"}, 20*time.Millisecond)
		require.Equal(t, []int64{7, 9}, seeds[:2])
		clock := seeds[2:]
		consecutive(t, clock)
		require.GreaterOrEqual(t, len(clock), 2, "seeds of 20 ms in a budget of 2 s")
		require.LessOrEqual(t, len(clock), 100, "seeds of at least 20 ms in a budget of 2 s")
	})
}
