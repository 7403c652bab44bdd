; `__shared__` array declarations (one or more dimensions), with the outermost array declarator.
(declaration
  (type_qualifier "__shared__")
  type: (_) @type
  declarator: (array_declarator) @array) @decl
