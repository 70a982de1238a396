// Package docs_test keeps docs/contract.md the one contract the repository
// cites: every "§N.M" (with an optional "rule K" or "items K-L", and the
// sections a list continues it with: "§4.3 rule 6 and 4.4 item 4") anywhere
// in the repository must name a section and an entry that exist there, and
// no citation of the old, unpublished specification may remain.
package docs_test

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
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
	// The pieces of a citation, each matched where the previous one ended
	// (citations): a section, "rule(s)"/"item(s)", an entry or a range of
	// them, the separator of a list, and a list's next section, which has a
	// dot so that it never reads as an entry ("§3.6 rules 1-5, 7" lists
	// entries, "§3, 3.6 rule 4" sections).
	sectionRE     = regexp.MustCompile(`^\d+(?:\.\d+)?`)
	entriesRE     = regexp.MustCompile(`^ (?:rule|item)s? `)
	entryNumberRE = regexp.MustCompile(`^(\d+)(?:[-–](\d+))?`)
	separatorRE   = regexp.MustCompile(`^(?:, | and )`)
	nextSectionRE = regexp.MustCompile(`^(?:, | and )§?(\d+\.\d+)`)
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

// citation is one section cited, with the entries it names.
type citation struct {
	// text is the citation as written, from the section number on.
	text    string
	section string
	// entries are inclusive ranges of entry numbers.
	entries [][2]int
}

// citations finds every citation in line: each "§N.M" with its rules or
// items, and each section a list continues it with ("§3, 3.6 rule 4",
// "§4.3 rule 6 and 4.4 item 4").
func citations(line string) []citation {
	var out []citation
	for {
		i := strings.Index(line, "§")
		if i < 0 {
			return out
		}
		line = line[i+len("§"):]
		for {
			sec := sectionRE.FindString(line)
			if sec == "" {
				break
			}
			c := citation{section: sec}
			n := len(sec)
			if m := entriesRE.FindString(line[n:]); m != "" {
				first := n + len(m)
				for k := first; ; {
					r := entryNumberRE.FindStringSubmatch(line[k:])
					if r == nil || k > first && sectionRE.FindString(line[k:]) != r[1] {
						break // the list goes on with a section: "§4.3 rule 6 and 4.4"
					}
					lo, _ := strconv.Atoi(r[1])
					hi := lo
					if r[2] != "" {
						hi, _ = strconv.Atoi(r[2])
					}
					c.entries = append(c.entries, [2]int{lo, hi})
					k += len(r[0])
					n = k
					sep := separatorRE.FindString(line[k:])
					if sep == "" {
						break
					}
					k += len(sep)
				}
			}
			c.text = line[:n]
			out = append(out, c)
			line = line[n:]
			m := nextSectionRE.FindStringSubmatchIndex(line)
			if m == nil {
				break
			}
			line = line[m[2]:]
		}
	}
}

// check returns what is wrong with one citation, or "".
func (c contract) check(cit citation) string {
	got, ok := c[cit.section]
	if !ok {
		return "no section " + cit.section
	}
	for _, r := range cit.entries {
		for n := r[0]; n <= r[1]; n++ {
			if !got[n] {
				return "section " + cit.section + " has no entry " + strconv.Itoa(n)
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
	if len(c["3.6"]) != 7 || len(c["4.3"]) != 8 {
		t.Errorf("contract.md: §3.6 has %d rules and §4.3 %d, want 7 and 8 (their rule numbers are cited)", len(c["3.6"]), len(c["4.3"]))
	}
}

func TestEveryCitationNamesAnExistingSection(t *testing.T) {
	root := repoRoot(t)
	c := parseContract(t, "contract.md")
	n := 0
	textFiles(t, root, func(rel string, b []byte) {
		for i, line := range strings.Split(string(b), "\n") {
			for _, cit := range citations(line) {
				n++
				if msg := c.check(cit); msg != "" {
					t.Errorf("%s:%d: %q cites docs/contract.md, which has %s", rel, i+1, "§"+cit.text, msg)
				}
			}
		}
	})
	if n < 100 {
		t.Errorf("found only %d citations of docs/contract.md; the walk or the pattern is broken", n)
	}
}

// TestCitationsReadsEveryForm holds citations to the forms the repository
// writes, and check to refusing a section or an entry the contract lacks.
func TestCitationsReadsEveryForm(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []citation
	}{
		{"contract §3.6.", []citation{{text: "3.6", section: "3.6"}}},
		{"(§3.6 rule 4)", []citation{{text: "3.6 rule 4", section: "3.6", entries: [][2]int{{4, 4}}}}},
		{"§3.6 rules 1-5, 7; shapes (2, 5)", []citation{{text: "3.6 rules 1-5, 7", section: "3.6", entries: [][2]int{{1, 5}, {7, 7}}}}},
		{"§4.4 items 2 and 4", []citation{{text: "4.4 items 2 and 4", section: "4.4", entries: [][2]int{{2, 2}, {4, 4}}}}},
		{"contract §3, 3.6 rule 4", []citation{{text: "3", section: "3"}, {text: "3.6 rule 4", section: "3.6", entries: [][2]int{{4, 4}}}}},
		{"§4.3 rule 6 and 4.4 item 4:", []citation{
			{text: "4.3 rule 6", section: "4.3", entries: [][2]int{{6, 6}}},
			{text: "4.4 item 4", section: "4.4", entries: [][2]int{{4, 4}}},
		}},
		{"| §3.6 rule 6, §8.5 |", []citation{{text: "3.6 rule 6", section: "3.6", entries: [][2]int{{6, 6}}}, {text: "8.5", section: "8.5"}}},
		{"no citation: 3.6 rule 4, 1.20", nil},
	} {
		if got := citations(tt.line); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("citations(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
	c := parseContract(t, "contract.md")
	// Without their section sign: the walk of TestEveryCitationNamesAnExistingSection
	// reads this file too.
	for _, tt := range []struct{ line, want string }{
		{"3.6 rule 4", ""},
		{"3.9", "no section 3.9"},
		{"3.6 rules 6-8", "section 3.6 has no entry 8"},
		{"4.3, 4.19 item 1", "no section 4.19"},
	} {
		var got []string
		for _, cit := range citations("\u00a7" + tt.line) {
			if msg := c.check(cit); msg != "" {
				got = append(got, msg)
			}
		}
		if want := []string(nil); tt.want != "" {
			want = []string{tt.want}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("checking %q: %q, want %q", tt.line, got, want)
			}
		} else if got != nil {
			t.Errorf("checking %q: %q, want nothing", tt.line, got)
		}
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
