//go:build !race

package keeper_test

// raceEnabled: the race detector is on.
const raceEnabled = false
