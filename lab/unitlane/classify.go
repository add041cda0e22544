package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

const module = "github.com/tidemark/tidemark"

type pkgDir struct {
	importPath, dir string
	allTests        map[string]bool
}

func modulePackages() ([]pkgDir, error) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}", module+"/...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkgDir
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, dir, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, fmt.Errorf("go list: unexpected line %q", sc.Text())
		}
		pkgs = append(pkgs, pkgDir{importPath: path, dir: dir})
	}
	return pkgs, sc.Err()
}

// testenvPure are lab/testenv's functions that start nothing: helpers over
// a *testing.T, a context, a metric or a trace. Every other testenv name
// counts as a server.
var testenvPure = map[string]bool{
	"Main": true, "Context": true, "Unique": true, "Logger": true, "Metric": true,
	"Eventually": true, "FreePort": true, "StartOTLP": true, "Tree": true,
	"RealKafka": true, "KafkaEnv": true, "KafkaRoleACLs": true, "PGConf": true,
}

var testName = regexp.MustCompile(`^(Test|Fuzz|Example)([^a-z].*)?$`)

// classify reads the Go files of the package in dir (as the default build
// sees them) and returns its top-level tests, fuzz targets and examples
// that reach no server (the lane), and the names of all of them.
func classify(dir string) (lane []string, all map[string]bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	funcs := map[string][]*ast.FuncDecl{} // by name; methods as ".Name"
	imports := map[*ast.File]map[string]string{}
	fileOf := map[*ast.FuncDecl]*ast.File{}
	var tests []*ast.FuncDecl
	all = map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		imports[f] = fileImports(f)
		isTest := strings.HasSuffix(name, "_test.go")
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			fileOf[fd] = f
			key := fd.Name.Name
			if fd.Recv != nil {
				key = "." + key
			}
			funcs[key] = append(funcs[key], fd)
			if isTest && fd.Recv == nil && testName.MatchString(fd.Name.Name) && fd.Name.Name != "TestMain" {
				tests = append(tests, fd)
				all[fd.Name.Name] = true
			}
		}
	}
	// A function is tainted when its body names a server starter or a
	// tainted function of the package; iterate to the fixed point.
	tainted := map[*ast.FuncDecl]bool{}
	edges := map[*ast.FuncDecl][]string{}
	for _, fds := range funcs {
		for _, fd := range fds {
			direct, refs := scan(fd, imports[fileOf[fd]], funcs)
			tainted[fd] = direct
			edges[fd] = refs
		}
	}
	for changed := true; changed; {
		changed = false
		for fd, refs := range edges {
			if tainted[fd] {
				continue
			}
			for _, r := range refs {
				for _, g := range funcs[r] {
					if tainted[g] {
						tainted[fd] = true
						changed = true
					}
				}
			}
		}
	}
	for _, fd := range funcs["TestMain"] {
		if tainted[fd] {
			return nil, all, nil // servers start before any test: nothing here is fast
		}
	}
	for _, fd := range tests {
		if !tainted[fd] {
			lane = append(lane, fd.Name.Name)
		}
	}
	sort.Strings(lane)
	return lane, all, nil
}

func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, is := range f.Imports {
		path, _ := strconv.Unquote(is.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if is.Name != nil {
			name = is.Name.Name
		}
		m[name] = path
	}
	return m
}

// scan returns whether fd's body itself reaches a server and the names of
// the package's functions and methods it mentions.
func scan(fd *ast.FuncDecl, imports map[string]string, funcs map[string][]*ast.FuncDecl) (server bool, refs []string) {
	if fd.Body == nil {
		return false, nil
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok {
				if path, ok := imports[x.Name]; ok {
					if serverCall(path, n.Sel.Name) {
						server = true
					}
					return false
				}
			}
			if _, ok := funcs["."+n.Sel.Name]; ok {
				refs = append(refs, "."+n.Sel.Name)
			}
		case *ast.Ident:
			if _, ok := funcs[n.Name]; ok {
				refs = append(refs, n.Name)
			}
		case *ast.CallExpr:
			if execCommand(n, imports) && !goList(n) {
				server = true
			}
		}
		return true
	})
	return server, refs
}

func serverCall(path, name string) bool {
	switch {
	case path == module+"/lab/testenv":
		return !testenvPure[name]
	case strings.HasPrefix(path, module+"/lab/"):
		return true
	case strings.HasSuffix(path, "/kfake"):
		return true
	}
	return false
}

func execCommand(c *ast.CallExpr, imports map[string]string) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && imports[x.Name] == "os/exec" && (sel.Sel.Name == "Command" || sel.Sel.Name == "CommandContext")
}

// goList reports whether c is exec.Command("go", "list", ...): the toolchain
// the tests run under, reading the module, starts nothing.
func goList(c *ast.CallExpr) bool {
	args := c.Args
	if sel := c.Fun.(*ast.SelectorExpr); sel.Sel.Name == "CommandContext" && len(args) > 0 {
		args = args[1:]
	}
	return len(args) >= 2 && literal(args[0]) == "go" && literal(args[1]) == "list"
}

func literal(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		s, _ := strconv.Unquote(b.Value)
		return s
	}
	return ""
}
