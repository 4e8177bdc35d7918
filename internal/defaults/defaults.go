// Package defaults fills a configuration's unset fields from its defaults,
// so that each default is written once (in the Defaults function the flags
// also show) and never again field by field.
package defaults

import "reflect"

// Fill sets every exported field of *c that holds its zero value to the
// same field of d. T must be a struct type.
func Fill[T any](c *T, d T) {
	cv, dv := reflect.ValueOf(c).Elem(), reflect.ValueOf(d)
	for i := range cv.NumField() {
		if f := cv.Field(i); f.CanSet() && f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
}
