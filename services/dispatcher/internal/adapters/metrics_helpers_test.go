package adapters

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func histogram(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

func histogramSum(t *testing.T, h prometheus.Histogram) float64 {
	return histogram(t, h).GetSampleSum()
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	return histogram(t, h).GetSampleCount()
}
