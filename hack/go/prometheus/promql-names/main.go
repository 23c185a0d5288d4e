// Command promql-names prints the metric names that PromQL expressions select, one per line,
// sorted and unique. It reads a JSON array of expressions on stdin. Prometheus' own parser
// reads them, so a name is found wherever Prometheus would look one up (offsets, subqueries,
// `__name__` matchers), and an expression Prometheus would reject fails here too.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fail("stdin is not a JSON array of strings: %v", err)
	}
	p := parser.NewParser(parser.Options{})
	names := map[string]bool{}
	for _, text := range exprs {
		expr, err := p.ParseExpr(text)
		if err != nil {
			fail("%q: %v", text, err)
		}
		for _, matchers := range parser.ExtractSelectors(expr) {
			name := metricName(matchers)
			if name == "" {
				fail("%q: a selector without an exact metric name", text)
			}
			names[name] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	for _, name := range sorted {
		fmt.Println(name)
	}
}

// metricName is the name a selector matches exactly ("" for a regular expression or none):
// a name that cannot be checked against /metrics is an error, not a pass.
func metricName(matchers []*labels.Matcher) string {
	for _, m := range matchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "promql-names: "+format+"\n", args...)
	os.Exit(1)
}
