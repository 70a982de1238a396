package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
)

// goSite is one place in the webhook's Go code where a check refuses a
// request, and the edit that makes it not refuse.
type goSite struct {
	Func       string // the function holding it
	N          int    // its index among that function's sites
	Line       int
	Start, End int    // byte offsets of the statement
	Repl       string // what replaces the statement
	Show       string // the refusal, as the table shows it
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
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	var sites []goSite
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || fn.Type.Results == nil || len(fn.Type.Results.List) == 0 {
			continue
		}
		first := text(fn.Type.Results.List[0].Type)
		if first != "field.ErrorList" && first != "admission.Response" {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			name = strings.TrimPrefix(text(fn.Recv.List[0].Type), "*") + "." + name
		}
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
		return nil, fmt.Errorf("%s: the mutant of %s#%d does not parse: %w", filename, s.Func, s.N, err)
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
