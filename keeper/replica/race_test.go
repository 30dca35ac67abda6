//go:build race

package replica

// raceEnabled: the race detector is on, and tracks every byte bolt maps.
const raceEnabled = true
