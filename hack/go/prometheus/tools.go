//go:build tools

// Package tools pins promtool, which hack/build-promtool.sh builds to unit-test the chart's
// alerting rules (`promtool test rules`).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
