// A real OpenID provider for Canon's tests: panva's oidc-provider (OpenID certified), run with
// the machine's Node.js by tests/identity/providers.py, which installs the package from the npm
// registry into a cache directory and starts this script with a JSON configuration:
//   {issuer, port, jwks: {keys: [private JWKs]}, clients: [...], resources: {indicator: {...}}}
// People sign in through the provider's development login form (any password); who exists, their
// claims and whether they are enabled are set by the test through /_control/accounts/<sub>.
// A disabled or unknown account is one findAccount does not find: the provider then refuses its
// refresh tokens and its userinfo, as a real provider refuses a disabled person.
import dns from 'node:dns';
import { readFileSync } from 'node:fs';
import http from 'node:http';

import Provider, { errors } from 'oidc-provider';

// Canon's live server listens on localhost's IPv4 address; Node would try ::1 first.
dns.setDefaultResultOrder('ipv4first');
const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const accounts = new Map(); // sub -> {claims, enabled}

const provider = new Provider(config.issuer, {
  clients: config.clients,
  jwks: config.jwks,
  cookies: { keys: ['canon-test-cookie-key'] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username', 'given_name', 'family_name', 'groups'],
  },
  extraClientMetadata: { properties: ['groups'] },
  features: {
    devInteractions: { enabled: true },
    backchannelLogout: { enabled: true },
    clientCredentials: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => oneOf,
      useGrantedResource: async () => false,
      async getResourceServerInfo(ctx, indicator) {
        const resource = config.resources[indicator];
        if (!resource) throw new errors.InvalidTarget();
        return { accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } }, ...resource };
      },
    },
  },
  // A service's token carries its client's groups; a person's, their account's.
  async extraTokenClaims(ctx, token) {
    if (token.kind === 'ClientCredentials') {
      const { client } = ctx.oidc;
      return client && client.groups ? { groups: client.groups } : undefined;
    }
    const account = token.accountId && accounts.get(token.accountId);
    return account && account.enabled ? { groups: account.claims.groups || [] } : undefined;
  },
  // Refresh tokens for every client allowed the grant (no offline_access needed), bound to the
  // provider's session: signing out there ends them.
  async issueRefreshToken(ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  async findAccount(ctx, sub) {
    const account = accounts.get(sub);
    if (!account || !account.enabled) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, ...account.claims };
      },
    };
  },
  pkce: { required: () => true },
  // Its back-channel logout calls reach Canon's live server on loopback, which the provider's
  // own fetch refuses (its guard against server-side request forgery): a test-only choice.
  fetch: (url, options) => globalThis.fetch(url, { ...options, dispatcher: undefined }),
  ttl: { AccessToken: 600, IdToken: 600, RefreshToken: 86400, Session: 86400, Grant: 86400 },
});
provider.on('backchannel.error', (ctx, err, client) => {
  console.error(`backchannel logout to ${client.clientId} failed: ${err} ${err.cause || ""}`);
});
provider.on('server_error', (ctx, err) => console.error(`server error: ${err.stack}`));

const callback = provider.callback();

function readJson(req) {
  return new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (chunk) => { body += chunk; });
    req.on('end', () => {
      try { resolve(body ? JSON.parse(body) : {}); } catch (err) { reject(err); }
    });
  });
}

const server = http.createServer(async (req, res) => {
  const match = req.url.match(/^\/_control\/accounts\/([^/?]+)$/);
  if (match && req.method === 'PUT') {
    const body = await readJson(req);
    accounts.set(decodeURIComponent(match[1]), { claims: body.claims || {}, enabled: body.enabled !== false });
    res.writeHead(204).end();
    return;
  }
  callback(req, res);
});
server.listen(config.port, '127.0.0.1', () => {
  console.log(`oidc-provider listening at ${config.issuer}`);
});
