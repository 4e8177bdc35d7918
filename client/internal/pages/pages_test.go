package pages

import (
	"errors"
	"slices"
	"testing"
)

type page struct {
	items []int
	next  string
}

func (p *page) GetNextPageToken() string { return p.next }

func TestAll(t *testing.T) {
	book := map[string]*page{"": {[]int{1, 2}, "b"}, "b": {nil, "c"}, "c": {[]int{3}, ""}}
	var tokens []string
	list := func(token string) (*page, error) {
		tokens = append(tokens, token)
		if p, ok := book[token]; ok {
			return p, nil
		}
		return nil, errors.New("no such page")
	}
	items := func(p *page) []int { return p.items }

	var got []int
	for v, err := range All(list, items) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if !slices.Equal(got, []int{1, 2, 3}) || !slices.Equal(tokens, []string{"", "b", "c"}) {
		t.Fatalf("items %v, tokens %v", got, tokens)
	}

	// Breaking off asks for no further page.
	tokens = nil
	for range All(list, items) {
		break
	}
	if !slices.Equal(tokens, []string{""}) {
		t.Fatalf("tokens after break: %v", tokens)
	}

	// An error ends the iteration, yielded with the zero item.
	book["c"].next = "gone"
	got, tokens = nil, nil
	var errs int
	for v, err := range All(list, items) {
		if err != nil {
			errs++
			if v != 0 {
				t.Fatalf("item %d with the error", v)
			}
			continue
		}
		got = append(got, v)
	}
	if errs != 1 || !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("items %v, %d errors", got, errs)
	}
}
