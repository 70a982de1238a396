// Package docs_test keeps docs/contract.md the one contract the repository
// cites: every "§N.M" (with an optional "rule K" or "items K-L") anywhere in
// the repository must name a section and an entry that exist there, and no
// citation of the old, unpublished specification may remain.
package docs_test

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// contract is the parsed docs/contract.md: for each section number ("3",
// "3.6") the numbers of its top-level numbered entries ("1. ...").
type contract map[string]map[int]bool

var (
	headingRE = regexp.MustCompile(`^#{2,3} (\d+(?:\.\d+)?)\.? `)
	entryRE   = regexp.MustCompile(`^(\d+)\. `)
	// §3.6, §3.6 rule 4, §4.4 items 1-3, §4.4 items 2 and 4, §3.6 rules 1-5, 7.
	citationRE = regexp.MustCompile(`§(\d+(?:\.\d+)?)(?: (rule|item)s? (\d+(?:[-–]\d+)?(?:(?:, | and )\d+(?:[-–]\d+)?)*))?`)
	numberRE   = regexp.MustCompile(`\d+(?:[-–]\d+)?`)
	// The unpublished document the contract replaced. Spelled in two parts
	// so that this file does not cite it itself.
	oldSpecRE = regexp.MustCompile(`\b` + "SP" + `EC(\.md|\s+\d)`)
)

func parseContract(t *testing.T, path string) contract {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := contract{}
	var cur string
	inCode := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			cur = m[1]
			if c[cur] != nil {
				t.Errorf("%s: section %s appears twice", path, cur)
			}
			c[cur] = map[int]bool{}
			continue
		}
		if m := entryRE.FindStringSubmatch(line); m != nil && cur != "" {
			n, _ := strconv.Atoi(m[1])
			c[cur][n] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// check returns what is wrong with one citation, or "".
func (c contract) check(section, entries string) string {
	got, ok := c[section]
	if !ok {
		return "no section " + section
	}
	for _, r := range numberRE.FindAllString(entries, -1) {
		lo, hi := r, r
		if i := strings.IndexAny(r, "-–"); i >= 0 {
			lo, hi = r[:i], strings.TrimLeft(r[i:], "-–")
		}
		a, _ := strconv.Atoi(lo)
		b, _ := strconv.Atoi(hi)
		for n := a; n <= b; n++ {
			if !got[n] {
				return "section " + section + " has no entry " + strconv.Itoa(n)
			}
		}
	}
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// textFiles walks the repository (every module in it) and calls fn for each
// text file, skipping build outputs and local state.
func textFiles(t *testing.T, root string, fn func(rel string, b []byte)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", ".dev", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) {
			return nil // binary (a chart image, a fuzz corpus entry)
		}
		fn(filepath.ToSlash(rel), b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestContractSectionsAreNumberedOnce(t *testing.T) {
	c := parseContract(t, "contract.md")
	for _, want := range []string{"3.6", "4.3", "4.4", "8.6"} {
		if c[want] == nil {
			t.Errorf("contract.md lost section %s, which the rules cite", want)
		}
	}
	if len(c["3.6"]) != 7 || len(c["4.3"]) != 7 {
		t.Errorf("contract.md: §3.6 has %d rules and §4.3 %d, want 7 each (their rule numbers are cited)", len(c["3.6"]), len(c["4.3"]))
	}
}

func TestEveryCitationNamesAnExistingSection(t *testing.T) {
	root := repoRoot(t)
	c := parseContract(t, "contract.md")
	n := 0
	textFiles(t, root, func(rel string, b []byte) {
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range citationRE.FindAllStringSubmatch(line, -1) {
				n++
				if msg := c.check(m[1], m[3]); msg != "" {
					t.Errorf("%s:%d: %q cites docs/contract.md, which has %s", rel, i+1, m[0], msg)
				}
			}
		}
	})
	if n < 100 {
		t.Errorf("found only %d citations of docs/contract.md; the walk or the pattern is broken", n)
	}
}

func TestNothingCitesTheOldSpecification(t *testing.T) {
	textFiles(t, repoRoot(t), func(rel string, b []byte) {
		for i, line := range strings.Split(string(b), "\n") {
			if oldSpecRE.MatchString(line) {
				t.Errorf("%s:%d: cites a document users do not have; cite docs/contract.md as \"contract §N.M\": %s", rel, i+1, strings.TrimSpace(line))
			}
		}
	})
}
