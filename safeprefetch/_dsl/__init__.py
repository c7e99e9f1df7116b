"""Writing models: the DSL, the compiled machine, the specializer and the catalog loader."""
