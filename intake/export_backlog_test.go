package intake

import "github.com/prometheus/client_golang/prometheus"

// StreamEntries is the gauge of each shard's entries that /readyz sets,
// for the tests of package intake_test.
func (s *Server) StreamEntries() *prometheus.GaugeVec { return s.metrics.streamEntries }
