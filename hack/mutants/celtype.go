package main

import (
	"strings"
)

// celType tells, from the text of a CEL expression, whether it is a bool or
// a list ("bool", "list", or "list:bool" when the type of its items is
// known too), or "" when it is something else or this cannot tell. vars holds what is known of the policy's earlier variables. It reads
// only the top of the expression (the operator applied last, or the last
// call of a chain), which is all a variable's type needs, so it stays small
// and needs no CEL environment: a policy variable whose type it cannot tell
// gets no constant mutant, never a wrong one (the API server would refuse a
// policy whose variable changed type, and the tests with it).
func celType(expr string, vars map[string]string) string {
	return typeOf(celTokens(expr), vars)
}

type celTok struct {
	s     string
	depth int // brackets open before it
}

// celTokens splits an expression into tokens: string literals whole,
// identifiers, numbers, and the operators CEL has (two-character ones
// first); ".?" (an optional field) is one token.
func celTokens(expr string) []celTok {
	var out []celTok
	depth := 0
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '\'' || c == '"' || (c == 'r' || c == 'R' || c == 'b' || c == 'B') && i+1 < len(expr) && (expr[i+1] == '\'' || expr[i+1] == '"'):
			j := i
			raw := false
			if c != '\'' && c != '"' {
				raw = c == 'r' || c == 'R'
				j++
			}
			q := string(expr[j])
			if strings.HasPrefix(expr[j:], q+q+q) {
				q = q + q + q
			}
			j += len(q)
			for j < len(expr) && !strings.HasPrefix(expr[j:], q) {
				if expr[j] == '\\' && !raw {
					j++
				}
				j++
			}
			j += len(q)
			if j > len(expr) {
				j = len(expr)
			}
			out = append(out, celTok{expr[i:j], depth})
			i = j
			continue
		case isIdent(c):
			j := i
			for j < len(expr) && (isIdent(expr[j]) || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			out = append(out, celTok{expr[i:j], depth})
			i = j
			continue
		case c >= '0' && c <= '9':
			j := i
			for j < len(expr) && (isIdent(expr[j]) || expr[j] >= '0' && expr[j] <= '9' || expr[j] == '.' && j+1 < len(expr) && expr[j+1] >= '0' && expr[j+1] <= '9') {
				j++
			}
			out = append(out, celTok{expr[i:j], depth})
			i = j
			continue
		}
		tok := string(c)
		for _, two := range []string{"||", "&&", "==", "!=", "<=", ">=", ".?"} {
			if strings.HasPrefix(expr[i:], two) {
				tok = two
				break
			}
		}
		switch tok {
		case "(", "[", "{":
			out = append(out, celTok{tok, depth})
			depth++
		case ")", "]", "}":
			depth--
			out = append(out, celTok{tok, depth})
		default:
			out = append(out, celTok{tok, depth})
		}
		i += len(tok)
	}
	return out
}

func isIdent(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

var (
	boolMethods = map[string]bool{"all": true, "exists": true, "exists_one": true, "existsOne": true, "startsWith": true, "endsWith": true,
		"matches": true, "contains": true, "hasValue": true, "isSorted": true}
	listMethods = map[string]bool{"filter": true, "map": true, "transformList": true, "sortBy": true, "slice": true, "distinct": true,
		"flatten": true, "reverse": true, "split": true, "sort": true}
)

func typeOf(ts []celTok, vars map[string]string) string {
	if len(ts) == 0 {
		return ""
	}
	base := ts[0].depth
	top := func(i int) bool { return ts[i].depth == base }
	// The ternary binds loosest: its type is its branches'.
	for i := range ts {
		if top(i) && ts[i].s == "?" {
			nested := 0
			for j := i + 1; j < len(ts); j++ {
				if !top(j) {
					continue
				}
				switch ts[j].s {
				case "?":
					nested++
				case ":":
					if nested > 0 {
						nested--
						continue
					}
					if t := typeOf(ts[i+1:j], vars); t != "" {
						return t
					}
					return typeOf(ts[j+1:], vars)
				}
			}
			return ""
		}
	}
	for i := range ts {
		if top(i) && (ts[i].s == "||" || ts[i].s == "&&") {
			return "bool"
		}
	}
	for i := range ts {
		if top(i) {
			switch ts[i].s {
			case "==", "!=", "<", "<=", ">", ">=", "in":
				return "bool"
			}
		}
	}
	for i := 1; i < len(ts); i++ {
		if top(i) && (ts[i].s == "+" || ts[i].s == "-") {
			if typeOf(ts[:i], vars) == "list" {
				return "list"
			}
			return ""
		}
	}
	if ts[0].s == "!" {
		return "bool"
	}
	// A primary and its chain of selections, indexes and calls: the type is
	// the last link's.
	var links [][]celTok // each link: its tokens
	for i := 0; i < len(ts); {
		j := i + 1
		if ts[i].s == "(" || ts[i].s == "[" || ts[i].s == "{" {
			j = closing(ts, i) + 1
		} else if ts[i].s == "." || ts[i].s == ".?" {
			j = i + 2
			if j < len(ts) && ts[j].s == "(" {
				j = closing(ts, j) + 1
			}
		} else if j < len(ts) && ts[j].s == "(" {
			j = closing(ts, j) + 1
		}
		if j > len(ts) {
			j = len(ts)
		}
		links = append(links, ts[i:j])
		i = j
	}
	last := links[len(links)-1]
	if len(links) == 1 {
		switch {
		case last[0].s == "true" || last[0].s == "false":
			return "bool"
		case last[0].s == "[":
			if items := args(last); len(items) > 0 {
				return listOf(typeOf(items[0], vars))
			}
			return "list"
		case last[0].s == "(":
			return typeOf(last[1:len(last)-1], vars)
		case last[0].s == "has" && len(last) > 1:
			return "bool"
		case last[0].s == "dyn" && len(last) > 2:
			return typeOf(last[2:len(last)-1], vars)
		}
		return ""
	}
	if len(links) == 2 && links[0][0].s == "variables" && len(last) == 2 && last[0].s == "." {
		return vars[last[1].s]
	}
	// An item of a list variable whose items' type is known.
	if len(links) == 3 && links[0][0].s == "variables" && len(links[1]) == 2 && links[1][0].s == "." && last[0].s == "[" {
		_, item, _ := strings.Cut(vars[links[1][1].s], ":")
		return item
	}
	if (last[0].s == "." || last[0].s == ".?") && len(last) > 2 && last[2].s == "(" {
		name := last[1].s
		switch {
		case boolMethods[name]:
			return "bool"
		case name == "map" || name == "transformList":
			// The last argument is the items' expression.
			if as := args(last[2:]); len(as) >= 2 {
				return listOf(typeOf(as[len(as)-1], vars))
			}
			return "list"
		case listMethods[name]:
			return "list"
		case name == "orValue":
			return typeOf(last[3:len(last)-1], vars)
		}
	}
	return ""
}

// listOf is the type of a list whose items are of type item.
func listOf(item string) string {
	if item == "" {
		return "list"
	}
	return "list:" + item
}

// args splits the tokens inside a bracketed group (its first token the
// opening bracket) at its top-level commas.
func args(group []celTok) [][]celTok {
	if len(group) < 2 {
		return nil
	}
	in := group[1 : len(group)-1]
	if len(in) == 0 {
		return nil
	}
	var out [][]celTok
	start := 0
	for i, t := range in {
		if t.s == "," && t.depth == group[0].depth+1 {
			out = append(out, in[start:i])
			start = i + 1
		}
	}
	return append(out, in[start:])
}

// closing is the index of the bracket closing ts[i], or len(ts).
func closing(ts []celTok, i int) int {
	for j := i + 1; j < len(ts); j++ {
		if ts[j].depth == ts[i].depth && (ts[j].s == ")" || ts[j].s == "]" || ts[j].s == "}") {
			return j
		}
	}
	return len(ts)
}
