package testenv

import (
	"fmt"
	"regexp"
	"strconv"
)

// MetricValue reads the value of name, a metric of one labelled sample,
// from a Prometheus text exposition (what /metrics serves).
func MetricValue(exposition []byte, name string) (float64, error) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{[^}]*\} (\S+)$`).FindSubmatch(exposition)
	if m == nil {
		return 0, fmt.Errorf("testenv: no %s in the metrics", name)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
