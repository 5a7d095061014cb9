package deltawriter

import (
	"reflect"
	"strings"
)

// Add returns the counters of two writers together: a field named Peak...
// and Commits (every writer counts the same commits) take the larger
// value, a string the second's when it has one, every other number the
// sum; the nested index counters likewise. A field added to Stats or
// dedup.Stats is summed without a change here.
func (s Stats) Add(o Stats) Stats {
	addFields(reflect.ValueOf(&s).Elem(), reflect.ValueOf(o))
	return s
}

func addFields(dst, src reflect.Value) {
	t := dst.Type()
	for i := range t.NumField() {
		name := t.Field(i).Name
		d, v := dst.Field(i), src.Field(i)
		switch d.Kind() {
		case reflect.Struct:
			addFields(d, v)
		case reflect.Int, reflect.Int64:
			if strings.HasPrefix(name, "Peak") || name == "Commits" {
				d.SetInt(max(d.Int(), v.Int()))
			} else {
				d.SetInt(d.Int() + v.Int())
			}
		case reflect.String:
			if v.String() != "" {
				d.SetString(v.String())
			}
		default:
			panic("deltawriter: Stats.Add cannot add field " + name + " of kind " + d.Kind().String())
		}
	}
}
