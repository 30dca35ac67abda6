package router

import "github.com/prometheus/client_golang/prometheus"

// metrics are what an endpoint counts, for the node's monitor.
type metrics struct {
	connections prometheus.Gauge
	requests    *prometheus.CounterVec // by the shard a request went to; "several" for a multi across shards
	multis      *prometheus.CounterVec // cross-shard multis, by outcome
	expired     prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xkeeper_endpoint_connections",
			Help: "Client connections open on the node's endpoint."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xkeeper_endpoint_requests_total",
			Help: "Requests the endpoint routed, by the shard they went to (several: a multi across shards)."}, []string{"to"}),
		multis: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xkeeper_endpoint_cross_shard_multis_total",
			Help: "Multis across mounts run as cross-shard transactions, by outcome (committed, failed, unknown: the connection ended)."}, []string{"outcome"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "xkeeper_endpoint_sessions_expired_total",
			Help: "Client sessions the endpoint ended because their session on another shard had expired."}),
	}
}

// Collectors returns the endpoint's metrics.
func (r *Router) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.metrics.connections, r.metrics.requests, r.metrics.multis, r.metrics.expired}
}
