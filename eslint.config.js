// Lint rules for twill: typescript-eslint's type-aware recommended set, with
// floating promises and misused promises as hard errors (rule 8 of DESIGN.md).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ['eslint.config.js'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
      'no-restricted-syntax': [
        'error',
        { selector: 'ExportDefaultDeclaration', message: 'Use named exports (DESIGN.md rule 10).' },
      ],
    },
  },
  { files: ['eslint.config.js', 'vitest.config.ts'], rules: { 'no-restricted-syntax': 'off' } },
  // vitest's asymmetric matchers (expect.stringContaining …) are typed `any`.
  { files: ['test/**/*.ts'], rules: { '@typescript-eslint/no-unsafe-assignment': 'off' } },
);
