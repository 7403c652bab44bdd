; Pointer parameters of function definitions, with the __restrict__ qualifier when written.
(function_definition
  declarator: (function_declarator
    parameters: (parameter_list
      (parameter_declaration
        declarator: (pointer_declarator) @declarator) @param))) @function
