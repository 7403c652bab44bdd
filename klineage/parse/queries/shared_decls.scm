; `__shared__` declarations (arrays and scalars; `extern __shared__` too), with their type.
(declaration
  (type_qualifier "__shared__")
  type: (_) @type) @decl
