// Command rulecheck checks Prometheus rule files with Prometheus's own rule
// parser (model/rulefmt, the code `promtool check rules` runs): the YAML
// structure, every PromQL expression, the label and annotation templates, and
// duplicate rules within a group. With -exprs it parses each line of the given
// files as one PromQL expression instead (the dashboard's queries, after the
// caller has replaced Grafana's variables). It exits non-zero naming each
// problem.
//
// Usage: rulecheck FILE...  |  rulecheck -exprs FILE...
package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	args := os.Args[1:]
	exprs := len(args) > 0 && args[0] == "-exprs"
	if exprs {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: rulecheck FILE... | rulecheck -exprs FILE...")
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	failed := false
	for _, path := range args {
		var ok bool
		if exprs {
			ok = checkExprs(p, path)
		} else {
			ok = checkRules(p, path)
		}
		failed = failed || !ok
	}
	if failed {
		os.Exit(1)
	}
}

func checkRules(p parser.Parser, path string) bool {
	logger := slog.New(slog.DiscardHandler)
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, p, logger)
	ok := len(errs) == 0
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, err)
	}
	if groups == nil {
		return false
	}
	n := 0
	for _, g := range groups.Groups {
		seen := map[string]bool{}
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			key := name + "\x00" + r.Expr
			if seen[key] {
				fmt.Fprintf(os.Stderr, "%s: group %q: duplicate rule %q\n", path, g.Name, name)
				ok = false
			}
			seen[key] = true
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(os.Stderr, "%s: no rules\n", path)
		ok = false
	}
	fmt.Printf("%s: %d rules in %d groups\n", path, n, len(groups.Groups))
	return ok
}

func checkExprs(p parser.Parser, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return false
	}
	defer f.Close()
	ok := true
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		if sc.Text() == "" {
			continue
		}
		n++
		if _, err := p.ParseExpr(sc.Text()); err != nil {
			fmt.Fprintf(os.Stderr, "%s:%d: %v\n  in: %s\n", path, line, err, sc.Text())
			ok = false
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
		ok = false
	}
	fmt.Printf("%s: %d expressions\n", path, n)
	return ok
}
