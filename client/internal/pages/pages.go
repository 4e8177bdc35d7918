// Package pages turns a paged List call into an iterator, for the SDK's
// List methods (client.ListSchedules, queue.Client.List).
package pages

import "iter"

// All iterates over the items of every page, from the first (token "") to
// the one that names no next page; it stops at the first error, which it
// yields with the zero item.
func All[T any, P interface{ GetNextPageToken() string }](page func(token string) (P, error), items func(P) []T) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		token := ""
		for {
			p, err := page(token)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, item := range items(p) {
				if !yield(item, nil) {
					return
				}
			}
			if token = p.GetNextPageToken(); token == "" {
				return
			}
		}
	}
}
