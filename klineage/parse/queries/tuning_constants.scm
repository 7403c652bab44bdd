; Compile-time integer constants: `#define NAME value`, `constexpr T NAME = literal;` and template
; parameter defaults `template <int NAME = literal>`.
(preproc_def
  name: (identifier) @name
  value: (preproc_arg) @value) @define
(declaration
  (type_qualifier "constexpr")
  declarator: (init_declarator
    declarator: (identifier) @name
    value: (number_literal) @value)) @constexpr
(optional_parameter_declaration
  declarator: (identifier) @name
  default_value: (number_literal) @value) @default
(declaration
  (type_qualifier "const")
  declarator: (init_declarator
    declarator: (identifier) @name
    value: (number_literal) @value)) @const
(field_declaration
  (type_qualifier "constexpr")
  declarator: (field_identifier) @name
  default_value: (number_literal) @value) @member
