package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// goSite is one place in the webhook's Go code where a check refuses a
// request, and the edit that makes it not refuse; or the condition of a
// branch that admits a request early, and the edit that always or never
// takes it.
type goSite struct {
	Func       string // the function holding it
	N          int    // its index among that function's sites (of its kind)
	Line       int
	Start, End int    // byte offsets of the statement or condition
	Repl       string // what replaces it
	Show       string // the refusal or the branch, as the table shows it
	// Taken, for a branch site, is "always" or "never".
	Taken string
}

// goSites finds the refusals of one file:
//
//   - in a function returning field.ErrorList first (a validator of
//     internal/admit): every `errs = append(errs, <field error>)`, made
//     `_ = <field error>` (the check no longer adds its error, the others
//     still run), and every `return <errors>, ...` other than nil, made
//     `return nil, ...` (the validator admits where it refused);
//   - in a function returning admission.Response (a handler of
//     internal/webhook): every `return denial(...)` or
//     `return configDenial(...)`, made `return admission.Allowed(...)`.
//
// The replaced expression is still evaluated into _, so no variable becomes
// unused and every mutant compiles.
func goSites(filename string, src []byte) ([]goSite, error) {
	fset, text, funcs, err := parseResultFuncs(filename, src, "field.ErrorList", "admission.Response")
	if err != nil {
		return nil, err
	}
	var sites []goSite
	for _, rf := range funcs {
		fn, name, first := rf.decl, rf.name, rf.first
		n := 0
		add := func(stmt ast.Node, repl, show string) {
			sites = append(sites, goSite{
				Func: name, N: n, Line: fset.Position(stmt.Pos()).Line,
				Start: fset.Position(stmt.Pos()).Offset, End: fset.Position(stmt.End()).Offset,
				Repl: repl, Show: oneLine(show),
			})
			n++
		}
		var walkErr error
		ast.Inspect(fn.Body, func(node ast.Node) bool {
			switch s := node.(type) {
			case *ast.FuncLit:
				return false
			case *ast.ReturnStmt:
				if len(s.Results) == 0 {
					return true
				}
				r0 := s.Results[0]
				rest := ""
				for _, r := range s.Results[1:] {
					rest += ", " + text(r)
				}
				switch first {
				case "field.ErrorList":
					if id, ok := r0.(*ast.Ident); ok && id.Name == "nil" {
						return true
					}
					switch r0.(type) {
					case *ast.CompositeLit, *ast.Ident:
						add(s, "{ _ = "+text(r0)+"; return nil"+rest+" }", "return "+text(r0))
					}
				case "admission.Response":
					if call, ok := r0.(*ast.CallExpr); ok {
						if id, ok := call.Fun.(*ast.Ident); ok && (id.Name == "denial" || id.Name == "configDenial") {
							add(s, "{ _ = "+text(r0)+`; return admission.Allowed("mutation check: this refusal removed") }`, text(r0))
						}
					}
				}
			case *ast.AssignStmt:
				if first != "field.ErrorList" || s.Tok != token.ASSIGN || len(s.Lhs) != 1 || len(s.Rhs) != 1 {
					return true
				}
				call, ok := s.Rhs[0].(*ast.CallExpr)
				if !ok {
					return true
				}
				if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "append" || len(call.Args) < 2 || text(call.Args[0]) != text(s.Lhs[0]) {
					return true
				}
				if !callsField(call) {
					return true
				}
				if len(call.Args) != 2 || call.Ellipsis.IsValid() {
					walkErr = fmt.Errorf("%s: %s: append of more than one field error: give each its own append", fset.Position(s.Pos()), fn.Name.Name)
					return false
				}
				add(s, "_ = "+text(call.Args[1]), text(call.Args[1]))
			}
			return true
		})
		if walkErr != nil {
			return nil, walkErr
		}
	}
	return sites, nil
}

// resultFunc is a function with a body whose first result has a type a
// finder looks for.
type resultFunc struct {
	decl  *ast.FuncDecl
	name  string // Type.Method for a method
	first string // the first result's type, as written
}

// parseResultFuncs parses one file and returns the source text of a node,
// and the functions whose first result type is one of results.
func parseResultFuncs(filename string, src []byte, results ...string) (*token.FileSet, func(ast.Node) string, []resultFunc, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, nil, nil, err
	}
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	var funcs []resultFunc
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || fn.Type.Results == nil || len(fn.Type.Results.List) == 0 {
			continue
		}
		first := text(fn.Type.Results.List[0].Type)
		if !slices.Contains(results, first) {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			name = strings.TrimPrefix(text(fn.Recv.List[0].Type), "*") + "." + name
		}
		funcs = append(funcs, resultFunc{decl: fn, name: name, first: first})
	}
	return fset, text, funcs, nil
}

// branchSites finds the early admission.Allowed branches of one file's
// handlers (functions returning admission.Response): each `if <cond>` and
// each case of a switch without a tag whose body returns
// admission.Allowed(...) (with or without .WithWarnings). Each gives two
// sites, in source order: the condition made `(<cond>) || true`, so the
// branch is always taken and every request it sees first is admitted, and
// `(<cond>) && false`, so it is never taken and the requests it skipped go
// on to the checks after it. The condition stays evaluated, so every
// mutant compiles.
func branchSites(filename string, src []byte) ([]goSite, error) {
	fset, text, funcs, err := parseResultFuncs(filename, src, "admission.Response")
	if err != nil {
		return nil, err
	}
	var sites []goSite
	for _, rf := range funcs {
		fn, name := rf.decl, rf.name
		n := 0
		add := func(cond ast.Expr, body []ast.Stmt) {
			ret := allowedReturn(body)
			if ret == nil {
				return
			}
			for _, t := range []struct{ taken, repl string }{{"always", "(" + text(cond) + ") || true"}, {"never", "(" + text(cond) + ") && false"}} {
				sites = append(sites, goSite{
					Func: name, N: n, Line: fset.Position(cond.Pos()).Line,
					Start: fset.Position(cond.Pos()).Offset, End: fset.Position(cond.End()).Offset,
					Repl: t.repl, Show: oneLine(text(cond) + " -> " + text(ret.Results[0])), Taken: t.taken,
				})
			}
			n++
		}
		ast.Inspect(fn.Body, func(node ast.Node) bool {
			switch s := node.(type) {
			case *ast.FuncLit:
				return false
			case *ast.IfStmt:
				add(s.Cond, s.Body.List)
			case *ast.SwitchStmt:
				if s.Tag != nil {
					return true
				}
				for _, c := range s.Body.List {
					if cc, ok := c.(*ast.CaseClause); ok && len(cc.List) == 1 {
						add(cc.List[0], cc.Body)
					}
				}
			}
			return true
		})
	}
	return sites, nil
}

// allowedReturn is the statement of body that returns admission.Allowed,
// or nil.
func allowedReturn(body []ast.Stmt) *ast.ReturnStmt {
	for _, st := range body {
		ret, ok := st.(*ast.ReturnStmt)
		if !ok || len(ret.Results) != 1 {
			continue
		}
		e := ret.Results[0]
		for {
			call, ok := e.(*ast.CallExpr)
			if !ok {
				break
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				break
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "admission" && sel.Sel.Name == "Allowed" {
				return ret
			}
			e = sel.X
		}
	}
	return nil
}

// callsField is true when the appended values build a field.Error.
func callsField(call *ast.CallExpr) bool {
	found := false
	for _, a := range call.Args[1:] {
		ast.Inspect(a, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "field" {
						found = true
					}
				}
			}
			return !found
		})
	}
	return found
}

// applySite returns src with the site's statement replaced, checked to parse.
func applySite(filename string, src []byte, s goSite) ([]byte, error) {
	out := make([]byte, 0, len(src)+len(s.Repl))
	out = append(out, src[:s.Start]...)
	out = append(out, s.Repl...)
	out = append(out, src[s.End:]...)
	if _, err := parser.ParseFile(token.NewFileSet(), filename, out, 0); err != nil {
		return nil, fmt.Errorf("%s: the mutant of %s#%d%s does not parse: %w", filename, s.Func, s.N, s.Taken, err)
	}
	return out, nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 90 {
		s = s[:87] + "..."
	}
	return s
}
