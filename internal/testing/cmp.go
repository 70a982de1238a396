package testing

import "github.com/google/go-cmp/cmp"

// ErrorsByMessage makes cmp compare error values (the BadValue of
// field.InternalError) by their text, so tables can state the whole expected
// field.ErrorList.
var ErrorsByMessage = cmp.FilterValues(func(x, y any) bool {
	_, okx := x.(error)
	_, oky := y.(error)
	return okx && oky
}, cmp.Comparer(func(x, y any) bool { return x.(error).Error() == y.(error).Error() }))
