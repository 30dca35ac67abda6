package testenv

// Largest returns the largest n ≥ 0 for which fits holds, for fits true
// up to some n and false past it, by doubling then bisecting: the
// boundary of a size check, for tests of requests at their bounds.
func Largest(fits func(n int) bool) int {
	lo, hi := 0, 1
	for fits(hi) {
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
