// The `twill` command from its source (`node src/cli/main.ts …`, `npm run twill -- …`): what the
// tests and a developer run, without a build. The built command, the one that is installed, is
// loader.ts (dist/src/cli/main.js), which runs the same command.ts with Node's flags and the code
// cache of the build.
import { main } from './command.ts';

process.exit(await main(process.argv, process.env));
