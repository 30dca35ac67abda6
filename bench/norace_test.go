//go:build !race

package bench

// raceEnabled: the race detector is on; the guards measure nothing true
// under it and run in the test command's pass without it.
const raceEnabled = false
