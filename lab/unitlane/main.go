// Command unitlane runs the fast test lane (make test-unit): every test,
// fuzz seed corpus and example in the module that starts no server and runs
// no external program, found by reading the test files rather than kept in
// a list, so a new server-free test joins the lane by itself.
//
// A test is in the lane unless it reaches, through the functions and
// methods of its own package (matched by name, so a doubt keeps a test out),
// a lab/testenv function that starts a server or builds a binary, any other
// lab/ package, kfake, or an os/exec command other than `go list`. What the
// reading misses, testenv catches at run time: with TIDEMARK_UNIT_LANE set
// (this command sets it) its server starters fail the test, so a test that
// starts a server cannot hide in the lane.
//
//	go run ./lab/unitlane [-list] [go test flags...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/tidemark/tidemark/lab/testenv"
)

func main() {
	list := flag.Bool("list", false, "print the lane (package and test names) and run nothing")
	flag.Parse()
	if err := run(*list, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "unitlane:", err)
		os.Exit(1)
	}
}

func run(list bool, testFlags []string) error {
	pkgs, err := modulePackages()
	if err != nil {
		return err
	}
	var lane []laneCase
	for i, p := range pkgs {
		tests, all, err := classify(p.dir)
		if err != nil {
			return fmt.Errorf("%s: %w", p.importPath, err)
		}
		pkgs[i].allTests = all
		for _, name := range tests {
			lane = append(lane, laneCase{pkg: p.importPath, name: name})
		}
	}
	if len(lane) == 0 {
		return errors.New("no server-free test found: the classifier is broken")
	}
	if list {
		for _, c := range lane {
			fmt.Println(c.pkg, c.name)
		}
		return nil
	}
	for _, g := range groups(lane, pkgs) {
		args := append([]string{"test"}, testFlags...)
		args = append(args, "-run", g.run)
		args = append(args, g.pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), testenv.LaneEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go test %s: %w", strings.Join(g.pkgs, " "), err)
		}
	}
	return nil
}

type laneCase struct{ pkg, name string }

type group struct {
	run  string
	pkgs []string
}

// groups folds the lane into as few `go test` runs as it can: one -run
// pattern serves several packages when it selects no test of theirs outside
// the lane (a name in the lane in one package and out of it in another
// forces a second run).
func groups(lane []laneCase, pkgs []pkgDir) []group {
	byPkg := map[string]map[string]bool{}
	var order []string
	for _, c := range lane {
		if byPkg[c.pkg] == nil {
			byPkg[c.pkg] = map[string]bool{}
			order = append(order, c.pkg)
		}
		byPkg[c.pkg][c.name] = true
	}
	all := map[string]map[string]bool{}
	for _, p := range pkgs {
		all[p.importPath] = p.allTests
	}
	type acc struct {
		names map[string]bool
		pkgs  []string
	}
	var accs []*acc
	for _, p := range order {
		placed := false
		for _, a := range accs {
			if fits(a.names, a.pkgs, p, byPkg, all) {
				for n := range byPkg[p] {
					a.names[n] = true
				}
				a.pkgs = append(a.pkgs, p)
				placed = true
				break
			}
		}
		if !placed {
			a := &acc{names: map[string]bool{}, pkgs: []string{p}}
			for n := range byPkg[p] {
				a.names[n] = true
			}
			accs = append(accs, a)
		}
	}
	var out []group
	for _, a := range accs {
		names := make([]string, 0, len(a.names))
		for n := range a.names {
			names = append(names, n)
		}
		sort.Strings(names)
		out = append(out, group{run: "^(" + strings.Join(names, "|") + ")$", pkgs: a.pkgs})
	}
	return out
}

// fits reports whether package p can join a run whose pattern names names
// and whose packages are pkgs without any of them running a test outside
// the lane.
func fits(names map[string]bool, pkgs []string, p string, byPkg, all map[string]map[string]bool) bool {
	for n := range byPkg[p] {
		for _, q := range pkgs {
			if all[q][n] && !byPkg[q][n] {
				return false
			}
		}
	}
	for n := range names {
		if all[p][n] && !byPkg[p][n] {
			return false
		}
	}
	return true
}
