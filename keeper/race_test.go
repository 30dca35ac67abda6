//go:build race

package keeper_test

// raceEnabled: the race detector is on, and slows every member's CPU
// work several times over.
const raceEnabled = true
