; Memory accesses through a pointer: `*address` and `base[index]`.
(pointer_expression
  operator: "*"
  argument: (_) @address) @deref
(subscript_expression
  argument: (_) @base
  indices: (subscript_argument_list) @index) @subscript
