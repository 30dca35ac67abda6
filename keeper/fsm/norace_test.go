//go:build !race

package fsm

// raceEnabled: the race detector is on, and allocation counts mean nothing.
const raceEnabled = false
