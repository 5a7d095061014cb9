// Package deltawriter owns one writer's commit window: the upsert rules that
// turn each change into a data row, a position delete or an equality delete,
// the data and delete files, and the commit payload of the window. It never
// talks to the catalog or the coordinator.
package deltawriter
