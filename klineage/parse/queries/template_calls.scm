; Uses of a function template with explicit arguments: `f<A, B>(...)`, `k<A, B><<<...>>>(...)`, `&f<A>`.
(template_function
  name: (identifier) @name
  arguments: (template_argument_list) @args) @use
