//go:build !race

package replica

// raceEnabled: the race detector is on.
const raceEnabled = false
