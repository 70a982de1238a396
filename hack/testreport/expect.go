package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Filter is the test selection of a go test run: its -run and -skip
// patterns, and whether it benchmarks or fuzzes.
type Filter struct {
	Run, Skip   string
	Bench, Fuzz bool
}

// GoTestArgs splits go test's arguments into the selection and the rest:
// the rest (build flags such as -tags, packages) is what ListTests takes
// to list the same packages built the same way.
func GoTestArgs(args []string) (list []string, f Filter) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-args" {
			return append(list, args[i:]...), f
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.TrimPrefix(name, "test.")
		if !strings.HasPrefix(a, "-") || !slices.Contains([]string{"run", "skip", "bench", "fuzz"}, name) {
			list = append(list, a)
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		switch name {
		case "run":
			f.Run = value
		case "skip":
			f.Skip = value
		case "bench":
			f.Bench = value != ""
		case "fuzz":
			f.Fuzz = value != ""
		}
	}
	return list, f
}

// Expects says whether go test runs the top-level test, fuzz target or
// example name (as go test -list prints it): tests and examples (go test
// -list names only the examples that have an output comment, the ones that
// run) always, fuzz targets (their seed corpus) unless the run fuzzes,
// benchmarks never; each only when -run selects it and -skip does not.
func (f Filter) Expects(name string) bool {
	switch {
	case strings.HasPrefix(name, "Test"), strings.HasPrefix(name, "Example"):
	case strings.HasPrefix(name, "Fuzz"):
		if f.Fuzz {
			return false
		}
	default:
		return false
	}
	return f.Selects(name)
}

// Selects applies -run and -skip to a top-level name as package testing
// does (testing/match.go): each pattern is split at the '/' and '|' outside
// brackets and parentheses; the name runs when the first element of one of
// -run's alternatives matches it, and is skipped when the first alternative
// of -skip whose first element matches it has no further element (a
// pattern such as TestA/x skips subtests, not TestA).
func (f Filter) Selects(name string) bool {
	if f.Run != "" {
		ok := false
		for _, alt := range splitPattern(f.Run) {
			if match(alt[0], name) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if f.Skip != "" {
		for _, alt := range splitPattern(f.Skip) {
			if match(alt[0], name) {
				return len(alt) > 1
			}
		}
	}
	return true
}

// match is testing's matchString: an unanchored regexp match. An invalid
// pattern matches nothing here; the test binary refuses it and fails the run.
func match(pattern, name string) bool {
	re, err := regexp.Compile(pattern)
	return err == nil && re.MatchString(name)
}

// splitPattern is testing's splitRegexp: the alternatives of a -run or
// -skip pattern, each a list of per-level patterns.
func splitPattern(s string) [][]string {
	var alts [][]string
	var cur []string
	brackets, parens := 0, 0
	for i := 0; i < len(s); {
		switch s[i] {
		case '[':
			brackets++
		case ']':
			if brackets--; brackets < 0 {
				brackets = 0
			}
		case '(':
			if brackets == 0 {
				parens++
			}
		case ')':
			if brackets == 0 {
				parens--
			}
		case '\\':
			i++
		case '/', '|':
			if brackets == 0 && parens == 0 {
				cur = append(cur, s[:i])
				if s[i] == '|' {
					alts, cur = append(alts, cur), nil
				}
				s, i = s[i+1:], 0
				continue
			}
		}
		i++
	}
	return append(alts, append(cur, s))
}

// ListTests names, per package (below module, as the report names
// packages), the top-level tests, fuzz targets and examples that go test
// runs in the packages args name, read from their test files the way go
// test reads them: go list picks the files the build flags (-tags) select,
// a function is a test by go test's own naming rule, and go/doc finds the
// examples that have an output comment (the only ones go test runs). It
// returns the packages go list could not load (the run fails on them
// too). Reading the source costs a second; go test -list would link every
// test binary a second time (a minute for make test-unit here).
func ListTests(goCmd string, dirs, args []string, module string) (listed map[string][]string, failed []string, err error) {
	listed = map[string][]string{}
	for _, dir := range dirs {
		cmd := exec.Command(goCmd, append([]string{"-C", dir, "list", "-e", "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles,Error"}, listArgs(args)...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, nil, fmt.Errorf("go -C %s list %s: %v\n%s", dir, strings.Join(listArgs(args), " "), err, strings.TrimSpace(stderr.String()))
		}
		dec := json.NewDecoder(&stdout)
		for {
			var p struct {
				ImportPath, Dir           string
				TestGoFiles, XTestGoFiles []string
				Error                     *struct{ Err string }
			}
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				return nil, nil, fmt.Errorf("go -C %s list: %v", dir, err)
			}
			pkg := shortPackage(module, p.ImportPath)
			if p.Error != nil {
				failed = append(failed, pkg)
				continue
			}
			names, err := testFuncs(p.Dir, append(p.TestGoFiles, p.XTestGoFiles...))
			if err != nil {
				failed = append(failed, pkg)
				continue
			}
			listed[pkg] = names
		}
	}
	return listed, failed, nil
}

// listArgs keeps what go list needs of go test's arguments: the packages
// and the build tags. Everything else is a test or build flag that does
// not change which files a package has.
func listArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-args" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			out = append(out, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "tags" {
			out = append(out, a)
			if !hasValue && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		if !hasValue && valueFlags[name] {
			i++
		}
	}
	return out
}

// valueFlags are the go test flags whose value may follow as the next
// argument (the boolean ones never take it that way).
var valueFlags = map[string]bool{
	"count": true, "timeout": true, "p": true, "parallel": true, "cpu": true, "benchtime": true,
	"fuzztime": true, "fuzzminimizetime": true, "coverprofile": true, "covermode": true, "coverpkg": true,
	"outputdir": true, "shuffle": true, "o": true, "exec": true, "mod": true, "modfile": true,
	"gcflags": true, "ldflags": true, "asmflags": true, "run": true, "skip": true, "bench": true, "fuzz": true,
}

// testFuncs returns the top-level Test, Fuzz and Example functions of the
// files go test compiles into a package's test binary.
func testFuncs(dir string, files []string) ([]string, error) {
	fset := token.NewFileSet()
	var parsed []*ast.File
	names := []string{}
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, f)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			n := fn.Name.Name
			if (isTest(n, "Test") && n != "TestMain") || isTest(n, "Fuzz") {
				names = append(names, n)
			}
		}
	}
	for _, ex := range doc.Examples(parsed...) {
		if ex.Output != "" || ex.EmptyOutput {
			names = append(names, "Example"+ex.Name)
		}
	}
	return names, nil
}

// isTest is go test's rule (cmd/go/internal/load): the name is the prefix,
// or the prefix followed by anything but a lower-case letter.
func isTest(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	if len(name) == len(prefix) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(name[len(prefix):])
	return !unicode.IsLower(r)
}

// shortPackage is an import path as the report and the allowlist name it:
// below module ("." for the module itself).
func shortPackage(module, importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}
